-- Trades an admission (its jti) for a session lease, once: 1 entered, 2 the same live session
-- again, -1 a replay of a traded admission, -2 the zone is full.
local used_key, leases_key, reserved_key, claimed_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now_ms, lease_ms, sid, target, remember_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now = tonumber(now_ms)
local prev = redis.call('GET', used_key)
if prev then
  local lease = redis.call('ZSCORE', leases_key, prev)
  if lease and tonumber(lease) > now then return {2, prev} end
  return {-1, ''}
end
redis.call('SET', used_key, sid, 'PX', remember_ms)
redis.call('ZREMRANGEBYSCORE', reserved_key, '-inf', now)
local r = redis.call('ZPOPMIN', reserved_key)
if #r == 0 then
  local live = redis.call('ZCOUNT', leases_key, now, '+inf') + redis.call('ZCARD', reserved_key)
  if live >= tonumber(target) then
    redis.call('DEL', used_key)
    return {-2, ''}
  end
end
redis.call('ZADD', leases_key, now + tonumber(lease_ms), sid)
redis.call('INCR', claimed_key)
return {1, sid}
