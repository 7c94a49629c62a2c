-- Free one key of a purged namespace (Producer.Purge).
-- KEYS[1] -> onceq:{<home>}:ns/id:wins, the windows key ns/id took; or
--            onceq:{<home>}:ns/id:win, a rule window whose key is in ns
-- ARGV[1] -> "wins": delete each window in KEYS[1] still held by ARGV[2],
--            the key, then KEYS[1]; "win": delete KEYS[1] when its holder
--            starts with ARGV[2], the namespace and '/' (a key of ns holds it)
-- Returns how many keys went. The windows of a set are read from it, not
-- passed: their keys derive from the payload (sets exist only where the insert took the windows).
local n = 0
if ARGV[1] == 'wins' then
  for _, w in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    if redis.call('GET', w) == ARGV[2] then
      n = n + redis.call('DEL', w)
    end
  end
  return n + redis.call('DEL', KEYS[1])
end
local h = redis.call('GET', KEYS[1])
if h and string.sub(h, 1, #ARGV[2]) == ARGV[2] then
  n = redis.call('DEL', KEYS[1])
end
return n
