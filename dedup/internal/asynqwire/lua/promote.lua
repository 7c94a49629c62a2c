-- promote starts a key's successor (the "successor" repeat policy): the one
-- job its next hash holds (msg: asynq's message, fp: its fingerprint) becomes
-- the key's task, pending, once the key's run has ended. Defined above
-- successor.lua and sweep.lua, which call it.
-- task, pending, archived, completed -> the key's task hash and its queue's
--   pending list, archived and completed sets
-- rec, nxt -> the key's record and its successor
-- registry, field -> the successors hash (onceq:successors) and the key's field in it
-- id -> the task id; now -> Unix ns (asynq's pending_since)
-- Returns 1 started, 0 no successor (its field is dropped), -1 the run has
-- not ended: the task is in any state but completed or archived, or the
-- record is running. The record (done or failed) goes with the old task:
-- the successor is the key's next incarnation and claims afresh.
local function promote(task, pending, archived, completed, rec, nxt, registry, field, id, now)
  local s = redis.call('HMGET', nxt, 'msg', 'fp')
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
  redis.call('DEL', task, rec, nxt)
  -- asynq's enqueue (lua/asynq/enqueue.lua), with the fields its guard adds
  redis.call('HSET', task, 'msg', s[1], 'state', 'pending', 'pending_since', now,
    'onceq_rec', rec, 'onceq_fp', s[2])
  redis.call('LPUSH', pending, id)
  redis.call('HDEL', registry, field)
  return 1
end
