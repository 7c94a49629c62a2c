-- Extend the lease of the current holder (heartbeat).
-- KEYS[1] -> onceq:{<home>}:ns/id:rec, the packed record
-- ARGV[1] -> the holder's prefix "r|<token>|<owner>|"
-- ARGV[2] -> record TTL in ms: lease + grace
-- Returns: 1 extended, 0 when the hold is not current (lease lost).
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
