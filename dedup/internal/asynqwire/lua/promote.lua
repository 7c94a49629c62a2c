-- promote starts a key's successor (the "successor" repeat policy): the one
-- job its next hash holds (msg: asynq's message, fp: its fingerprint, inc:
-- its incarnation) becomes the key's task, pending, once the key's run has
-- ended, and the key's history says so. Defined above sweep.lua, which
-- calls it, with the history's onceq_history above it.
-- task, pending, archived, completed -> the key's task hash and its queue's
--   pending list, archived and completed sets
-- rec, nxt, hist -> the key's record, its successor and its history
-- registry, field -> the successors hash (onceq:successors) and the key's field in it
-- id -> the task id; now -> Unix ns (asynq's pending_since)
-- head -> the head of the history's entry (history.Head), which lives at
--   least as long as the successor could have waited
-- Returns 1 started, 0 no successor (its field is dropped), -1 the run has
-- not ended: the task is in any state but completed or archived, or the
-- record is running. The record (done or failed) goes with the old task:
-- the successor is the key's next incarnation and claims afresh.
local function promote(task, pending, archived, completed, rec, nxt, hist, registry, field, id, now, head)
  local s = redis.call('HMGET', nxt, 'msg', 'fp', 'inc')
  if not s[1] then
    redis.call('HDEL', registry, field)
    return 0
  end
  local r = redis.call('GET', rec)
  if r and string.sub(r, 1, 2) == 'r|' then
    return -1
  end
  local st = redis.call('HGET', task, 'state')
  if st == 'completed' then
    redis.call('ZREM', completed, id)
  elseif st == 'archived' then
    redis.call('ZREM', archived, id)
  elseif st then
    return -1
  end
  local ttl = math.max(redis.call('PTTL', nxt), 1)
  redis.call('DEL', task, rec, nxt)
  -- asynq's enqueue (lua/asynq/enqueue.lua), with the fields its guard adds
  redis.call('HSET', task, 'msg', s[1], 'state', 'pending', 'pending_since', now,
    'onceq_rec', rec, 'onceq_fp', s[2], 'onceq_hist', hist)
  if s[3] and s[3] ~= '1' then
    redis.call('HSET', task, 'onceq_inc', s[3])
  end
  redis.call('LPUSH', pending, id)
  redis.call('HDEL', registry, field)
  onceq_history(hist, head .. 'e|' .. (s[3] or '') .. '|the successor started: the run before it ended', ttl, 'max', true)
  return 1
end
