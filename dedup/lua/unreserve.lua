-- Free a window, but only for the holder that took it.
-- KEYS[1] -> onceq:{<home>}:ns/id:win, the window string
-- ARGV[1] -> holder
-- Returns: 1 freed, 0 when another holder (or nobody) has it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
