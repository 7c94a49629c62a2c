-- A repeat under the "successor" policy, run in place of asynq's enqueue or
-- schedule script (defined above it unchanged as asynq_insert, with
-- promote.lua above that), once the producer found the key's job running,
-- waiting for a retry, ended, or with a successor already waiting.
-- KEYS[1], KEYS[2], ARGV[1..3] -> asynq's own: the task hash, and the pending
--   list (enqueue) or the scheduled set (schedule); message, id/time as asynq sends
-- KEYS[3..6] -> asynq:{<queue>}: pending, scheduled, archived, completed
-- KEYS[7] -> onceq:{ns/id}:rec, the record
-- KEYS[8] -> onceq:{ns/id}:next, the key's successor
-- KEYS[9] -> onceq:successors, the successors the workers' sweep starts
-- ARGV[4] -> the task id
-- ARGV[5] -> the job's fingerprint
-- ARGV[6] -> how long the successor waits at most, ms
-- ARGV[7] -> the queue (the registry's value)
-- ARGV[8] -> the key, namespace/id (the registry's field)
-- Returns: 2 the job waits as the successor of the running one (3: in place
-- of the successor that waited); 1 inserted: the key's run had ended, so the
-- job starts now as its next incarnation, in place of any successor; 0
-- refused, nothing written, as {0, the task's msg, state, result, the
-- record, its PTTL} (lua/guard.lua's refusal): the task is pending or
-- scheduled (the producer decides again from what it holds), or the key is
-- done with this job's content and no successor waits (a duplicate).
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
if st == 'pending' or st == 'scheduled' then
  return refuse()
end
if st == 'active' or st == 'retry' or (r and string.sub(r, 1, 2) == 'r|') then
  local had = redis.call('DEL', KEYS[8])
  redis.call('HSET', KEYS[8], 'msg', ARGV[1], 'fp', ARGV[5])
  redis.call('PEXPIRE', KEYS[8], ARGV[6])
  redis.call('HSET', KEYS[9], ARGV[8], ARGV[7])
  return 2 + had
end
if r and redis.call('EXISTS', KEYS[8]) == 0 and string.sub(r, 1, 2) == 'd|' and
    string.match(r, '^d|[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)|') == ARGV[5] then
  return refuse()
end
if st == 'completed' then
  redis.call('ZREM', KEYS[6], ARGV[4])
elseif st == 'archived' then
  redis.call('ZREM', KEYS[5], ARGV[4])
end
redis.call('DEL', KEYS[1], KEYS[7], KEYS[8])
redis.call('HDEL', KEYS[9], ARGV[8])
local n = asynq_insert()
if n == 1 then
  redis.call('HSET', KEYS[1], 'onceq_rec', KEYS[7], 'onceq_fp', ARGV[5])
end
return n
