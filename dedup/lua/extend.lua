-- Extend the lease of the current holder (heartbeat).
-- KEYS[1] -> onceq:{ns/id}:rec, the record hash
-- ARGV[1] -> fencing token of the holder
-- ARGV[2] -> lease in ms from now
-- ARGV[3] -> record TTL while running, in ms (lease + grace)
-- Returns: lease_until_ms, or 0 when the token is not current (lease lost).
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok')
if rec[1] ~= 'running' or rec[2] ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local lu = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lu', string.format('%.0f', lu))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return lu
