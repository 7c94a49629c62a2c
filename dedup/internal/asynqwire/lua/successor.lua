-- A repeat under the "successor" policy, run in place of asynq's enqueue or
-- schedule script (defined above it unchanged as asynq_insert, with the
-- history's onceq_history above that), once the
-- guard refused the job: the key has a task or a record.
-- KEYS[1], KEYS[2], ARGV[1..3] -> asynq's own: the task hash, and the pending
--   list (enqueue) or the scheduled set (schedule); message, id/time as asynq sends
-- KEYS[3..6] -> asynq:{<queue>}: pending, scheduled, archived, completed
-- KEYS[7] -> onceq:{<home>}:ns/id:rec, the record
-- KEYS[8] -> onceq:{<home>}:ns/id:next, the key's successor
-- KEYS[9] -> onceq:successors, the successors the workers' sweep starts
-- KEYS[10] -> onceq:{<home>}:ns/id:hist, the key's history (onceq:{<home>}: the type keeps none)
-- ARGV[4] -> the task id
-- ARGV[5] -> the job's fingerprint
-- ARGV[6] -> how long the successor waits at most, ms; the history's TTL
-- ARGV[7] -> the queue (the registry's value)
-- ARGV[8] -> the key, namespace/id (the registry's field)
-- ARGV[9] -> the head of the history's entry (history.Head)
-- ARGV[10] -> the job's incarnation
-- ARGV[11] -> "pending": the job was built to replace a task that has not
--            started (the task's incarnation); "after": to follow the
--            key's run (the next one)
-- Returns: 2 the job waits as the successor of the running one (3: in place
-- of the successor that waited); 1 inserted: it replaced the task that had
-- not started, or the key's run had ended, so it starts now, in place of
-- any successor; or a refusal, nothing written but the history, as
-- {0, the task's msg, state, result, the record, its PTTL} (guard.lua's):
-- the key moved on since the producer read it (it reads again), or the job
-- is a duplicate (the same content as the task that has not started, or
-- as the done job, with no successor waiting).
local st = redis.call('HGET', KEYS[1], 'state')
local r = redis.call('GET', KEYS[7])
local function refuse()
  local t = redis.call('HMGET', KEYS[1], 'msg', 'state', 'result')
  local pttl = -2
  if r then
    pttl = redis.call('PTTL', KEYS[7])
  end
  return {0, t[1] or '', t[2] or '', t[3] or '', r or '', pttl}
end
local function record(tail)
  onceq_history(KEYS[10], ARGV[9] .. tail, ARGV[6], 'max')
end
local function insert(why)
  local n = asynq_insert()
  if n == 1 then
    redis.call('HSET', KEYS[1], 'onceq_rec', KEYS[7], 'onceq_fp', ARGV[5])
    if onceq_keeps(KEYS[10]) then
      redis.call('HSET', KEYS[1], 'onceq_hist', KEYS[10])
    end
    if ARGV[10] ~= '1' then
      redis.call('HSET', KEYS[1], 'onceq_inc', ARGV[10])
    end
    record('e|' .. ARGV[10] .. '|' .. why)
  end
  return n
end
local waiting = st == 'pending' or st == 'scheduled'
if waiting ~= (ARGV[11] == 'pending') then
  return refuse()
end
if waiting then
  if redis.call('HGET', KEYS[1], 'onceq_fp') == ARGV[5] then
    record('d|' .. ARGV[10] .. '|' .. st)
    return refuse()
  end
  if st == 'pending' then
    redis.call('LREM', KEYS[3], 0, ARGV[4])
  else
    redis.call('ZREM', KEYS[4], ARGV[4])
  end
  redis.call('DEL', KEYS[1])
  return insert('replaced')
end
if st == 'active' or st == 'retry' or (r and string.sub(r, 1, 2) == 'r|') then
  local had = redis.call('DEL', KEYS[8])
  redis.call('HSET', KEYS[8], 'msg', ARGV[1], 'fp', ARGV[5], 'inc', ARGV[10])
  redis.call('PEXPIRE', KEYS[8], ARGV[6])
  redis.call('HSET', KEYS[9], ARGV[8], ARGV[7])
  record('e|' .. ARGV[10] .. '|waits as the successor of the running job')
  return 2 + had
end
if r and redis.call('EXISTS', KEYS[8]) == 0 and string.sub(r, 1, 2) == 'd|' and
    string.match(r, '^d|[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)|') == ARGV[5] then
  record('d||done')
  return refuse()
end
if st == 'completed' then
  redis.call('ZREM', KEYS[6], ARGV[4])
elseif st == 'archived' then
  redis.call('ZREM', KEYS[5], ARGV[4])
end
redis.call('DEL', KEYS[1], KEYS[7], KEYS[8])
redis.call('HDEL', KEYS[9], ARGV[8])
return insert('the run before it had ended')
