-- The next block of positions for one process, or -1 before the opening. The first block after
-- the opening opens the line (as the tick does): joins are numbered after everyone in the
-- pre-queue, whom the tick draws.
local open_key, next_key, pre_key = KEYS[1], KEYS[2], KEYS[3]
local block_size, now_ms, opens_at_ms = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', open_key) == 0 then
  if tonumber(now_ms) < tonumber(opens_at_ms) then return -1 end
  local k = redis.call('ZCARD', pre_key)
  local nx = tonumber(redis.call('GET', next_key) or '0')
  if nx < k then redis.call('SET', next_key, k) end
  redis.call('SET', open_key, '0')
end
return redis.call('INCRBY', next_key, block_size)
