-- Reset a key (Producer.Reset): its record, successor, rule windows and
-- task go in one step, and the key is free at once.
-- KEYS[1] -> onceq:{<home>}:ns/id:rec, the idempotency record
-- KEYS[2] -> onceq:{<home>}:ns/id:next, the key's successor
-- KEYS[3] -> onceq:{<home>}:ns/id:wins, the windows its job took
-- KEYS[4] -> onceq:{<home>}:ns/id:inc, the mark of the key's next incarnation
-- KEYS[5] -> onceq:{<home>}:ns/id:hist, the key's history, which keeps the reset
-- KEYS[6] -> asynq:{<queue>}:t:<id>, the key's task; KEYS[6..11] are absent
--            on Cluster, where the task sits in another slot
-- KEYS[7..11] -> asynq:{<queue>}:pending, scheduled, retry, archived, completed
-- ARGV[1] -> "1": a running job is let finish unrecorded (its record goes,
--            so its completion is refused as a lost lease; its task stays
--            for asynq to acknowledge); else a running job refuses the reset
-- ARGV[2] -> the holder (the key) the windows in KEYS[3] were taken for
-- ARGV[3] -> the incarnation the key's next job is, left in KEYS[4] when a
--            record or task went (the larger one stays)
-- ARGV[4] -> KEYS[4]'s TTL in ms, and the least the history lives on
-- ARGV[5] -> the reset's history entry (internal/history), appended when
--            something was there and went
-- KEYS[#KEYS] -> onceq:{<home>}:mark:<ns>/, the key's compact mark registry
--            (internal/mark), last, with
-- ARGV[6] -> the key's mark id and ARGV[7] now in ms: the key's mark goes
--            too. Absent: the key keeps none (Cluster).
-- Returns {1, task state, record} reset ({2, ...} with a running job let
-- finish unrecorded), {0, "", ""} when nothing was
-- there, {-1, task state, record} a running job refused it ("" for what is
-- absent). The windows are read from KEYS[3], not passed: their keys derive
-- from the payload (outside Cluster only, where any key is reachable).
local rec = redis.call('GET', KEYS[1])
local state = KEYS[6] and redis.call('HGET', KEYS[6], 'state')
local running = state == 'active'
if not running and rec and string.sub(rec, 1, 2) == 'r|' then
  -- A running record's lease is live while its PTTL exceeds its grace.
  running = redis.call('PTTL', KEYS[1]) > tonumber(string.match(rec, '|(%d+)$') or '0')
end
if running and ARGV[1] ~= '1' then
  return {-1, state or '', rec or ''}
end
local n = redis.call('DEL', KEYS[1], KEYS[2])
local marked = 0
if ARGV[6] then
  marked = onceq_mark_del(KEYS[#KEYS], ARGV[6], ARGV[7])
  n = n + marked
end
for _, w in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if redis.call('GET', w) == ARGV[2] then
    n = n + redis.call('DEL', w)
  end
end
n = n + redis.call('DEL', KEYS[3])
if state and state ~= 'active' then
  if state == 'pending' then
    redis.call('LREM', KEYS[7], 0, string.match(KEYS[6], ':t:(.*)$'))
  else
    local set = ({scheduled = KEYS[8], retry = KEYS[9], archived = KEYS[10], completed = KEYS[11]})[state]
    if set then
      redis.call('ZREM', set, string.match(KEYS[6], ':t:(.*)$'))
    end
  end
  redis.call('DEL', KEYS[6])
end
if rec or state or marked > 0 then
  local inc = tonumber(ARGV[3])
  if inc > tonumber(redis.call('GET', KEYS[4]) or '0') then
    redis.call('SET', KEYS[4], inc, 'PX', ARGV[4])
  end
elseif n == 0 then
  return {0, '', ''}
end
onceq_history(KEYS[5], ARGV[5], ARGV[4], 'max')
if running then
  return {2, state or '', rec or ''}
end
return {1, state or '', rec or ''}
