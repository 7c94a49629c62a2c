-- asynq v0.26.0's dequeue (lua/asynq/dequeue.lua) written out, with onceq's
-- claim of the task it pops. join.go runs this in its place, recognised by
-- the SHA-1 of asynq's script; TestJoinedDequeueIsAsynqs runs both on the
-- same keys and compares. Written out rather than wrapped: asynq's script
-- returns the message alone, and reading the task's id and onceq's fields
-- back cost two more commands per task than one HMGET here.
-- KEYS, ARGV[1..2] -> asynq's own: pending, paused, active, lease of one
--   queue; the lease's expiry and the queue's task key prefix
-- ARGV[3] -> owner prefix: this process's boot owner and '/'
-- ARGV[4] -> proposed token (the worker's clock in µs)
-- ARGV[5] -> now in ms, worker's clock
-- ARGV[6] -> the record's TTL in ms: lease and grace
-- ARGV[7] -> grace in ms: how long a running record outlives its lease
-- ARGV[8] -> the head of the history entry of a claim (internal/history
--            Head: now, "worker", ""), ended here with "a|<incarnation>|"
--            (a: acquired, history.Codes)
-- ARGV[9] -> the earliest time (ms, 13 digits) the guard may have checked
--            the key's marks for them to be left unread here: now less the
--            shortest result TTL a completion of this worker keeps a done
--            record for, less clock skew. Since then a mark cannot stand
--            without its record: a completion after the guard's check left
--            a record that still lives. "9999999999999": always read.
-- The library's functions (history, marks) come from onceq_lib() (scripts.go
-- onDemand), made only in a run that calls them: a fresh task calls none.
-- The task's hash carries onceq_rec (its record's key), onceq_fp (its
-- fingerprint), onceq_hist (its key's history) and onceq_inc (its
-- incarnation, when not the first) when onceq's producer guard enqueued it
-- outside Cluster, and onceq_mark ("<guard's now ms>|", the key's mark id,
-- then its mark registry: internal/mark) where the key may keep a compact
-- mark: an absent record with a live mark is not claimed. A claim is
-- appended to the history in this step.
-- Returns: nil (no task, or its hash has no message, as asynq's), asynq's
-- message alone (nothing claimed: not a guarded task), or {message, task
-- id, 1, record key, fingerprint, history}: the record was absent and is
-- now running, held by owner prefix .. task id ('|' as '_'), its key's
-- history onceq_hist ("": none, so the completion need not look for one);
-- or {message, task id, 0, record key, record}: it exists, and
-- the middleware decides from it (a done record, or the mark's word,
-- onceq_mark_word, of a key its compact mark alone remembers) or makes its
-- own claim (a running or failed one).
if redis.call('EXISTS', KEYS[2]) == 1 then
  return nil
end
local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[3])
if not id then
  return nil
end
local key = ARGV[2] .. id
redis.call('HSET', key, 'state', 'active')
redis.call('HDEL', key, 'pending_since')
redis.call('ZADD', KEYS[4], ARGV[1], id)
local t = redis.call('HMGET', key, 'msg', 'onceq_rec', 'onceq_fp', 'onceq_hist', 'onceq_inc', 'onceq_mark')
if not t[1] or not t[2] then
  return t[1] -- no message (asynq's nil) or not a guarded task: no claim
end
local owner = id
if string.find(id, '|', 1, true) then
  owner = string.gsub(id, '|', '_')
end
local fp = t[3] or ''
-- 13-digit ms stamps (2001 to 2286) compare as strings, with no tonumber;
-- onceq_mark, its stamp and then '|', sorts as its stamp against
-- ARGV[9] (an equal stamp sorts after it), with no substring made.
if t[6] and t[6] < ARGV[9] and redis.call('EXISTS', t[2]) == 0 then
  local m = string.sub(t[6], 15)
  local lib = onceq_lib()
  local same, at = lib.mark_get(string.sub(m, 17), string.sub(m, 1, 16), fp, ARGV[5])
  if same ~= nil then
    return {t[1], id, 0, t[2], lib.mark_word(same, at)}
  end
end
local old = redis.call('SET', t[2],
  'r|' .. ARGV[4] .. '|' .. ARGV[3] .. owner .. '|1|' .. ARGV[5] .. '|' .. fp .. '|' .. ARGV[5] .. '|' .. ARGV[7],
  'NX', 'PX', ARGV[6], 'GET')
if not old then
  if t[4] then
    onceq_lib().history(t[4], ARGV[8] .. 'a|' .. (t[5] or '1') .. '|', ARGV[6], 'max', true)
  end
  return {t[1], id, 1, t[2], fp, t[4] or ''}
end
return {t[1], id, 0, t[2], old}
