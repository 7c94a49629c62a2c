-- Take a time window for a key: the first caller wins until it expires.
-- KEYS[1] -> onceq:{<home>}:ns/id:win, the window string
-- ARGV[1] -> holder (e.g. the task id that was accepted)
-- ARGV[2] -> window in ms
-- Returns: {1} reserved, or {0, holder, remaining_ms} when the window is held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1])}
