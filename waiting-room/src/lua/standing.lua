-- Where a fan stands: position, admitted_through, when the line passed them (and the paused
-- total then), the admission rate, the paused total, the last ETA told, the tail.
local pos_key, admitted_key, passes_key, rate_key, paused_key, eta_key, tail_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local account = ARGV[1]
local p = tonumber(redis.call('HGET', pos_key, account) or '0')
local a = tonumber(redis.call('GET', admitted_key) or '0')
local passed, paused_at = -1, 0
if p > 0 and p <= a then
  local first = redis.call('ZRANGEBYSCORE', passes_key, p, '+inf', 'LIMIT', 0, 1)
  if #first > 0 then
    local t, _, pa = string.match(first[1], '^(%d+):(%d+):(%d+)')
    passed, paused_at = tonumber(t), tonumber(pa)
  end
end
local rate = redis.call('GET', rate_key) or '0'
local paused = tonumber(redis.call('GET', paused_key) or '0')
local e = redis.call('HGET', eta_key, account)
local eta, eta_at = '0', 0
if e then
  local x, y = string.match(e, '([^:]+):(%d+)')
  eta, eta_at = x, tonumber(y)
end
local tail = tonumber(redis.call('GET', tail_key) or '0')
return {p, a, passed, rate, paused, eta, eta_at, tail, paused_at}
