-- One admitter tick of a show: the opening draw, the published pause, the sweep of leases and
-- reservations, the count, and the advance of admitted_through by the free slots over the claim
-- rate (reserving the slots the newly admitted are expected to take), in one atomic step.
local admitted_key, leases_key, reserved_key, claimed_key, hist_key, tail_key, passes_key, paused_key, last_key, pre_key, open_key, pos_key, next_key, rate_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local now_ms, target, grace_ms, paused_flag, opens_at_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now = tonumber(now_ms)
local n = tonumber(target)
local grace = tonumber(grace_ms)
local paused = paused_flag == '1'
local opens = tonumber(opens_at_ms)
local drawn = 0
-- The opening draw: the pre-queue, in the order of its random scores, becomes positions 1..k;
-- later joins are numbered after it. In chunks, so one tick stays short.
if now >= opens then
  if redis.call('EXISTS', open_key) == 0 then
    local k = redis.call('ZCARD', pre_key)
    local nx = tonumber(redis.call('GET', next_key) or '0')
    if nx < k then redis.call('SET', next_key, k) end
    redis.call('SET', open_key, '0')
  end
  local chunk = redis.call('ZPOPMIN', pre_key, 5000)
  if #chunk > 0 then
    local base = tonumber(redis.call('GET', open_key) or '0')
    for i = 1, #chunk, 2 do
      base = base + 1
      redis.call('HSET', pos_key, chunk[i], base)
      drawn = drawn + 1
    end
    redis.call('SET', open_key, base)
    local t = tonumber(redis.call('GET', tail_key) or '0')
    if base > t then redis.call('SET', tail_key, base) end
  end
end
-- The published pause: every paused tick adds the time since the last tick.
local last = tonumber(redis.call('GET', last_key) or '0')
local dt = 0
if last > 0 and now > last then dt = now - last end
if paused and dt > 0 then redis.call('INCRBY', paused_key, dt) end
redis.call('SET', last_key, now)
-- The sweep, then the count.
redis.call('ZREMRANGEBYSCORE', leases_key, '-inf', now)
redis.call('ZREMRANGEBYSCORE', reserved_key, '-inf', now)
local live = redis.call('ZCARD', leases_key)
local reserved = redis.call('ZCARD', reserved_key)
local admitted = tonumber(redis.call('GET', admitted_key) or '0')
local claimed = tonumber(redis.call('GET', claimed_key) or '0')
local tail = tonumber(redis.call('GET', tail_key) or '0')
-- The claim rate: of the positions passed in the window the history covers, the share that
-- became sessions.
local rate = 1.0
local oldest = redis.call('LINDEX', hist_key, -1)
if oldest then
  local t0, a0, c0 = string.match(oldest, '(%d+):(%d+):(%d+)')
  local passed = admitted - tonumber(a0)
  if passed >= 20 then
    rate = (claimed - tonumber(c0)) / passed
    if rate < 0.1 then rate = 0.1 end
    if rate > 1 then rate = 1 end
  end
end
local adv = 0
local slots = n - live - reserved
if (not paused) and now >= opens and slots > 0 and admitted < tail then
  adv = math.floor(slots / rate)
  if adv > tail - admitted then adv = tail - admitted end
  local expect = math.ceil(adv * rate)
  if expect > slots then expect = slots end
  for i = 1, expect do
    redis.call('ZADD', reserved_key, now + grace, now .. ':' .. admitted .. ':' .. i)
  end
  admitted = redis.call('INCRBY', admitted_key, adv)
  redis.call('ZADD', passes_key, admitted, now .. ':' .. admitted .. ':' .. (redis.call('GET', paused_key) or '0'))
  reserved = reserved + expect
end
local newest = redis.call('LINDEX', hist_key, 0)
local newest_t = 0
if newest then newest_t = tonumber(string.match(newest, '^(%d+)')) end
if now - newest_t >= 400 then
  redis.call('LPUSH', hist_key, now .. ':' .. admitted .. ':' .. claimed)
  redis.call('LTRIM', hist_key, 0, 59)
end
-- The admission rate, an EWMA over 30 s.
local r = tonumber(redis.call('GET', rate_key) or '0')
if dt > 0 then
  local alpha = 1 - math.exp(-dt / 30000)
  r = r + alpha * (adv * 1000 / dt - r)
  redis.call('SET', rate_key, tostring(r))
end
return {admitted, live, reserved, adv, tostring(rate), tail, drawn}
