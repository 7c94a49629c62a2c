-- onceq's guard, run in place of asynq's enqueue or schedule script (defined
-- above it as asynq_insert(onceq_fields) by scripts.go, unchanged but for
-- the fields its HSET of the task also writes), so the checks and the
-- insert are one step, and the key's history records what it decided.
-- KEYS[1], KEYS[2], ARGV[1..3] -> asynq's own: the task hash, and the pending
--   list (enqueue) or the scheduled set (schedule); message, id/time as asynq sends
-- KEYS[3] -> onceq:{<home>}:ns/id:rec, the idempotency record; absent on Cluster
--            for a task outside its key's home queue (another slot)
-- KEYS[4] -> onceq:{<home>}:ns/id:hist, the key's history; with KEYS[3] (onceq:{<home>}: the
--            type keeps none)
-- KEYS[5] -> onceq:{<home>}:ns/id:inc, the key's next incarnation after a reset (with KEYS[3])
-- KEYS[6] -> onceq:{<home>}:ns/id:wins, the windows the job took (with KEYS[3]): a
--            reset finds them there; it lives as long as the longest of them
-- KEYS[7] -> onceq:{<home>}:mark:<ns>/, the key's compact mark registry
--            (internal/mark; with KEYS[3]; "": the key keeps none): with
--            no record, a live mark refuses the insert as a done record
--            does, and the task's hash keeps it as onceq_mark ("<now ms>|",
--            the mark id, then the registry) for the joined dequeue, which
--            reads marks only for a task checked here long enough ago
-- ARGV[4] -> the task id
-- ARGV[5] -> the asynq states an existing task may be replaced from, comma
--            delimited on both ends (",archived," or ",pending,scheduled,"); "" none.
--            "completed" is replaced only while the record is not done: its
--            retention outlived the record's done TTL (asynq's janitor lags)
-- ARGV[6] -> the job's fingerprint, kept in the task's hash with KEYS[3] as
--            onceq_fp and onceq_rec so the worker's dequeue can claim it (join.go)
-- ARGV[7] -> the head of the history's entries (internal/history Head: time,
--            way in, task id), which the guard ends with its decision:
--            (its code, history.Codes: d duplicate, c conflict, t throttled)
-- ARGV[8] -> an insert's end of entry ("e|<incarnation>|<reason>", history.Tail)
-- ARGV[9] -> the history's TTL in ms on insert (the job's unique window)
-- ARGV[10] -> the states of an existing task from which the producer
--            replaces it after a refusal (",completed,archived,"; "~pending"
--            only for other content; ",*," every refusal, which the
--            successor policy's own script follows): such a refusal is not
--            recorded, the insert that follows is
-- ARGV[11] -> the incarnation the task's headers carry, kept in the task's
--            hash as onceq_inc when above 1
-- KEYS[8..] -> onceq:{<home>}:ns/id:win, the job's rule windows (on Cluster
--            only when each is in the task's slot: then they are one step
--            with the insert)
-- ARGV[12] -> the key's mark id (with KEYS[7])
-- ARGV[13] -> now in ms (the producer's clock), for the mark
-- ARGV[14] -> the holder (the job key), with KEYS[3]
-- ARGV[15..18] -> the done TTL (ms) the producer expects of the key's marks,
--            and the names of the hashes of the 3 buckets its mark can be in
--            now (internal/mark Lookup), which the lookup then need not work out
-- ARGV[17+2i], ARGV[18+2i] -> rule i's window in ms, and "1" when a repeat of
--            its holder is refused too (Rule.Repeats), "2" when it is refused
--            once the key has forgotten the job (Rule.OutlastsKey: no done
--            record, no task but a completed one)
-- Returns: asynq's reply, 1 inserted or 0 refused (its task id conflict);
-- with rules {1, taken} on insert, taken a "1" or "0" per rule (a window
-- its holder already had is left alone), and {-1, i, holder, PTTL} when
-- rule i's window refused the job, before anything else is looked at (a
-- "2" window held by its holder: after the record). {-2, n} refuses, with
-- nothing written, an insert of an incarnation below n, which a reset left
-- in KEYS[5] (the reset key's next life gets a new downstream key); an
-- insert at n or above deletes it. It is
-- also refused, with nothing written, when the record says done (the task was
-- deleted, its job is still done) or the existing task is in another state.
-- Outside Cluster a refusal is {0, the task's msg, state, result, the
-- record, its PTTL} ("" for what is absent; PTTL -2 without a record; the
-- mark's word, onceq_mark_word, for a key its compact mark alone remembers).
-- A replaced task is removed in the same step as its successor is inserted:
-- never both, never neither.
-- Rule i's window is KEYS[W + i], its TTL and flag ARGV[R - 1 + 2i] and
-- ARGV[R + 2i]; the holder is ARGV[H].
local W, H, R = 7, 14, 18
local function throttled(i, h)
  local pttl = redis.call('PTTL', KEYS[W + i])
  onceq_history(KEYS[4], ARGV[7] .. 't||' .. h, pttl, 'keep')
  return {-1, i, h, pttl}
end
for i = W + 1, #KEYS do
  local h = redis.call('GET', KEYS[i])
  if h and (h ~= ARGV[H] or ARGV[R + 2 * (i - W)] == '1') then
    return throttled(i - W, h)
  end
end
local rec, inc = nil, 0
-- A refusal outside Cluster carries what holds the key, so the producer
-- can describe it without reading again.
local function refuse()
  if not KEYS[3] then
    return 0
  end
  local t = redis.call('HMGET', KEYS[1], 'msg', 'state', 'result', 'onceq_fp', 'onceq_inc')
  local r, pttl = '', -2
  if type(rec) == 'string' then
    r, pttl = rec, redis.call('PTTL', KEYS[3])
  end
  local marked = string.sub(r, 1, 2) == 'm|'
  local done = marked or string.sub(r, 1, 2) == 'd|'
  local state = t[2]
  local stored = t[4] or string.match(r, '^%a|[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)|') or ''
  local same = stored == '' or stored == ARGV[6]
  if marked and not t[4] then
    same = string.sub(r, 3, 3) == '1'
  end
  -- What the producer replaces after this refusal (producer.go, refused)
  -- is recorded by that insert; any other refusal is final: recorded here.
  local later = string.find(ARGV[10], ',*,', 1, true) or state and not done and
    ((state == 'completed' and r == '' and string.find(ARGV[10], ',completed,', 1, true)) or
     (state ~= 'completed' and (string.find(ARGV[10], ',' .. state .. ',', 1, true) or
       (not same and string.find(ARGV[10], ',~' .. state .. ',', 1, true)))))
  if not later then
    -- A done key without its task is its first incarnation: a later
    -- one's completed task is always kept (its headers carry the history).
    local inc = t[5] or ((state or done) and '1') or ''
    if same then
      local st = (done and 'done') or state or 'unknown'
      onceq_history(KEYS[4], ARGV[7] .. 'd|' .. inc .. '|' .. st, pttl > 0 and pttl or ARGV[9], 'keep')
    else
      onceq_history(KEYS[4], ARGV[7] .. 'c|' .. inc .. '|', pttl > 0 and pttl or ARGV[9], 'keep')
    end
  end
  return {0, t[1] or '', t[2] or '', t[3] or '', r, pttl}
end
if KEYS[3] then
  rec = redis.pcall('GET', KEYS[3])
  if type(rec) == 'string' and string.sub(rec, 1, 2) == 'd|' then
    return refuse()
  end
  if type(rec) ~= 'string' then
    local same, at = onceq_mark_get(KEYS[7], ARGV[12], ARGV[6], ARGV[13], ARGV[15], ARGV[16], ARGV[17], ARGV[18])
    if same ~= nil then
      rec = onceq_mark_word(same, at)
      return refuse()
    end
  end
  -- A "2" window its own holder has: the repeat is the key's to answer
  -- only while the key still knows the job.
  local state
  for i = W + 1, #KEYS do
    if ARGV[R + 2 * (i - W)] == '2' and redis.call('GET', KEYS[i]) == ARGV[H] then
      state = state or redis.call('HGET', KEYS[1], 'state') or 'none'
      if state == 'none' or state == 'completed' then
        return throttled(i - W, ARGV[H])
      end
    end
  end
  -- Most keys were never reset: no number read for them (strtod costs).
  local reset = redis.call('GET', KEYS[5])
  if reset then
    inc = tonumber(reset)
    if inc > tonumber(ARGV[11]) then
      return {-2, inc}
    end
  end
end
-- Without states to replace from, asynq's own insert refuses an existing
-- task: its state need not be read first.
local state = ARGV[5] ~= '' and redis.call('HGET', KEYS[1], 'state')
if state then
  if ARGV[5] == '' or not string.find(ARGV[5], ',' .. state .. ',', 1, true) then
    return refuse()
  end
  -- The state's list or set, named from the task's key as asynq names it
  -- (asynq:{<queue>}:t:<id> -> asynq:{<queue>}:<state>), in its slot: a
  -- key only a replacement uses is not handed to every insert.
  local set = string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[4] - 2) .. state
  if state == 'pending' then
    redis.call('LREM', set, 0, ARGV[4])
  elseif state == 'scheduled' or state == 'archived' or state == 'completed' then
    redis.call('ZREM', set, ARGV[4])
  else
    return refuse()
  end
  redis.call('DEL', KEYS[1])
end
-- onceq's fields go in asynq's own HSET of the task (scripts.go
-- withFields): each redis.call costs microseconds.
local f
if not KEYS[3] then
  f = {}
else
  f = {'onceq_rec', KEYS[3], 'onceq_fp', ARGV[6]}
  if onceq_keeps(KEYS[4]) then
    f[#f + 1] = 'onceq_hist'
    f[#f + 1] = KEYS[4]
  end
  if ARGV[11] ~= '1' then
    f[#f + 1] = 'onceq_inc'
    f[#f + 1] = ARGV[11]
  end
  if onceq_marks(KEYS[7]) then
    f[#f + 1] = 'onceq_mark'
    f[#f + 1] = ARGV[13] .. '|' .. ARGV[12] .. KEYS[7]
  end
end
local n = asynq_insert(f)
if n == 0 then
  return refuse()
end
if KEYS[3] then
  if inc > 0 then
    redis.call('DEL', KEYS[5])
  end
  if onceq_keeps(KEYS[4]) then -- else no entry is made: a string Lua collects
    onceq_history(KEYS[4], ARGV[7] .. ARGV[8], ARGV[9], 'max')
  end
end
if #KEYS <= W then
  return n
end
local taken, longest = '', 0
for i = W + 1, #KEYS do
  local ttl = tonumber(ARGV[R - 1 + 2 * (i - W)])
  if redis.call('SET', KEYS[i], ARGV[H], 'NX', 'PX', ttl) then
    taken = taken .. '1'
    redis.call('SADD', KEYS[6], KEYS[i])
    longest = math.max(longest, ttl)
  else
    taken = taken .. '0'
  end
end
if longest > 0 and longest > redis.call('PTTL', KEYS[6]) then
  redis.call('PEXPIRE', KEYS[6], longest)
end
return {n, taken}
