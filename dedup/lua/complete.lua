-- Record a run as done with its result.
-- KEYS[1] -> onceq:{ns/id}:rec, the record hash
-- ARGV[1] -> fencing token of the holder
-- ARGV[2] -> result bytes
-- ARGV[3] -> done TTL in ms
-- Returns: 1 done, 0 when the token is not current (lease lost: nothing written).
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok')
if rec[1] ~= 'running' or rec[2] ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000))
redis.call('HSET', KEYS[1], 'st', 'done', 'res', ARGV[2], 'ca', now, 'ua', now)
redis.call('HDEL', KEYS[1], 'lu', 'err')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
