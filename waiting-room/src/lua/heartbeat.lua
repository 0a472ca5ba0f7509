-- Renews a live session lease in one atomic step: 1 renewed, 0 it had expired (or never existed).
local leases_key = KEYS[1]
local sid, until_ms, now_ms = ARGV[1], ARGV[2], ARGV[3]
local expires = redis.call('ZSCORE', leases_key, sid)
if (not expires) or tonumber(expires) <= tonumber(now_ms) then return 0 end
redis.call('ZADD', leases_key, 'XX', until_ms, sid)
return 1
