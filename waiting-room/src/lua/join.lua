-- One place per account: the existing one, else the candidate position (after the opening), else
-- a place in the pre-queue (-1). requeue = '1': the fan's admission lapsed, back of the line.
-- A candidate of 0 was asked for before the opening; if the line opened since (another join's
-- block or the admitter's tick), the fan takes the next position as a one-place block.
local pos_key, pre_key, open_key, tail_key, next_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local account, candidate, lottery, requeue = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local p = redis.call('HGET', pos_key, account)
if p and requeue ~= '1' then return tonumber(p) end
if redis.call('EXISTS', open_key) == 0 then
  redis.call('ZADD', pre_key, 'NX', lottery, account)
  return -1
end
if redis.call('ZSCORE', pre_key, account) then return -1 end
local c = tonumber(candidate)
if c <= 0 then c = redis.call('INCR', next_key) end
redis.call('HSET', pos_key, account, c)
local t = tonumber(redis.call('GET', tail_key) or '0')
if c > t then redis.call('SET', tail_key, c) end
return c
