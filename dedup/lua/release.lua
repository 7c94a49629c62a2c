-- Give a claim back after a failed run, so the next delivery can claim at once.
-- KEYS[1] -> onceq:{ns/id}:rec, the record hash
-- ARGV[1] -> fencing token of the holder
-- ARGV[2] -> cause (the handler's error)
-- ARGV[3] -> failed TTL in ms
-- Returns: 1 released, 0 when the token is not current (lease lost: nothing written).
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok')
if rec[1] ~= 'running' or rec[2] ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000))
redis.call('HSET', KEYS[1], 'st', 'failed', 'err', ARGV[2], 'ua', now)
redis.call('HDEL', KEYS[1], 'lu')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
