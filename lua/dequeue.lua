-- onceq's claim, run after asynq's dequeue script in the same call (join.go
-- appends asynq's script unchanged above this, as asynq_dequeue).
-- KEYS, ARGV[1..2] -> asynq's own: pending, paused, active, lease of one
--   queue; the lease's expiry and the queue's task key prefix
-- ARGV[3] -> owner prefix: this process's boot owner and '/'
-- ARGV[4] -> proposed token (the worker's clock in µs)
-- ARGV[5] -> now in ms, worker's clock
-- ARGV[6] -> lease in ms
-- ARGV[7] -> grace in ms: how long a running record outlives its lease
-- The task's hash carries onceq_rec (its record's key) and onceq_fp (its
-- fingerprint) when onceq's producer guard enqueued it outside Cluster.
-- Returns: nil (no task), asynq's message alone (nothing claimed: not a
-- guarded task), or {message, task id, 1, record key, fingerprint}: the
-- record was absent and is now running, held by owner prefix .. task id
-- ('|' as '_'), or {message, task id, 0, record key, record}: it exists, and
-- the middleware decides from it (a done record) or makes its own claim (a
-- running or failed one).
local msg = asynq_dequeue()
if not msg then
  return nil
end
local id = redis.call('LINDEX', KEYS[3], 0)
local f = redis.call('HMGET', ARGV[2] .. id, 'onceq_rec', 'onceq_fp')
if not f[1] then
  return msg
end
local owner = ARGV[3] .. string.gsub(id, '|', '_')
local old = redis.call('SET', f[1],
  string.format('r|%s|%s|1|%s|%s|%s|%s', ARGV[4], owner, ARGV[5], f[2] or '', ARGV[5], ARGV[7]),
  'NX', 'PX', tonumber(ARGV[6]) + tonumber(ARGV[7]), 'GET')
if not old then
  return {msg, id, 1, f[1], f[2] or ''}
end
return {msg, id, 0, f[1], old}
