-- Hand an orphaned active task back to asynq, as asynq's own recoverer
-- would (v0.26.0's retryCmd and archiveCmd), and release its claim, in one
-- step: its owner's liveness key is gone, or asynq's lease ran out 30 s ago
-- (asynq's own margin for clock skew) with no claim held or with the
-- claim's lease run out too.
-- KEYS[1]  -> asynq:{<q>}:t:<id>, the task hash
-- KEYS[2]  -> asynq:{<q>}:active
-- KEYS[3]  -> asynq:{<q>}:lease
-- KEYS[4]  -> asynq:{<q>}:pending
-- KEYS[5]  -> asynq:{<q>}:archived
-- KEYS[6]  -> asynq:{<q>}:processed:<yyyy-mm-dd>
-- KEYS[7]  -> asynq:{<q>}:failed:<yyyy-mm-dd>
-- KEYS[8]  -> asynq:{<q>}:processed
-- KEYS[9]  -> asynq:{<q>}:failed
-- KEYS[10] -> onceq:{<home>}:ns/id:rec, the claim's record
-- KEYS[11] -> onceq:{<home>}:live:<owner>, the owner's liveness key in the home
-- ARGV[1]  -> task id
-- ARGV[2]  -> the task message as read (the step refuses if it changed)
-- ARGV[3]  -> the message with the attempt counted and the error set
-- ARGV[4]  -> "retry" or "archive" (retries spent)
-- ARGV[5]  -> the holder's prefix "r|<token>|<owner>|", or "" when no claim is held
-- ARGV[6]  -> now in ms
-- ARGV[7]  -> the release cause
-- ARGV[8]  -> failed TTL in ms
-- ARGV[9]  -> stats expiry, Unix s
-- ARGV[10] -> now, Unix s (asynq's lease scores and archive times)
-- ARGV[11] -> archive cutoff, Unix s (90 days ago)
-- ARGV[12] -> archive size limit
-- ARGV[13] -> asynq:{<q>}:t:, the task key prefix
-- ARGV[14] -> max int64
-- Returns: 1 retried, 2 archived, 0 nothing done (the owner lives, the task
-- or the claim moved on).
if ARGV[5] ~= '' then
  local v = redis.call('GET', KEYS[10])
  if not v or string.sub(v, 1, #ARGV[5]) ~= ARGV[5] then
    return 0
  end
  if redis.call('EXISTS', KEYS[11]) == 1 then
    -- The owner lives, but no handler of it extends the claim or asynq's
    -- lease (a dequeue whose reply was lost): orphaned once both ran out.
    local grace = tonumber(string.match(v, '|(%d+)$'))
    local lease = redis.call('ZSCORE', KEYS[3], ARGV[1])
    if not grace or redis.call('PTTL', KEYS[10]) > grace or
        not lease or tonumber(lease) >= tonumber(ARGV[10]) - 30 then
      return 0
    end
  end
else
  local v = redis.call('GET', KEYS[10])
  if v and string.sub(v, 1, 1) == 'r' then
    return 0 -- a live claim: its owner decides
  end
  local lease = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if not lease or tonumber(lease) >= tonumber(ARGV[10]) - 30 then -- asynq's 30 s margin for skew
    return 0
  end
end
if redis.call('HGET', KEYS[1], 'msg') ~= ARGV[2] then
  return 0
end
if not redis.call('LPOS', KEYS[2], ARGV[1]) then
  return 0
end
-- The first write may grow memory, so a Redis that refuses writes (OOM,
-- NOREPLICAS, READONLY, MISCONF) refuses it and with it the whole step,
-- before anything changed. (Once a script has written, Redis lets it go on
-- under OOM: a write that frees memory first would let it half-run.)
local res = 1
if ARGV[4] == 'archive' then
  redis.call('ZADD', KEYS[5], ARGV[10], ARGV[1])
  res = 2
else
  -- Straight to the dequeue end of pending, as asynq's requeue on shutdown
  -- does: asynq's recoverer would wait out a retry delay of 15 s or more.
  redis.call('RPUSH', KEYS[4], ARGV[1])
end
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if ARGV[5] ~= '' then
  -- Release, as finish.lua does: keep token, owner, attempts, first seen and
  -- fingerprint; the next claim takes the key at once.
  local v = redis.call('GET', KEYS[10])
  local head = string.match(v, '^r(|.*|)[^|]*|[^|]*$')
  redis.call('SET', KEYS[10], 'f' .. head .. ARGV[6] .. '|' .. ARGV[7], 'PX', ARGV[8])
end
if res == 2 then
  local old = redis.call('ZRANGE', KEYS[5], '-inf', ARGV[11], 'BYSCORE')
  if #old > 0 then
    for _, id in ipairs(old) do
      redis.call('DEL', ARGV[13] .. id)
    end
    redis.call('ZREM', KEYS[5], unpack(old))
  end
  local extra = redis.call('ZRANGE', KEYS[5], 0, -ARGV[12])
  if #extra > 0 then
    for _, id in ipairs(extra) do
      redis.call('DEL', ARGV[13] .. id)
    end
    redis.call('ZREM', KEYS[5], unpack(extra))
  end
  redis.call('HSET', KEYS[1], 'msg', ARGV[3], 'state', 'archived')
else
  redis.call('HSET', KEYS[1], 'msg', ARGV[3], 'state', 'pending')
end
local n = redis.call('INCR', KEYS[6])
if tonumber(n) == 1 then
  redis.call('EXPIREAT', KEYS[6], ARGV[9])
end
local m = redis.call('INCR', KEYS[7])
if tonumber(m) == 1 then
  redis.call('EXPIREAT', KEYS[7], ARGV[9])
end
local total = redis.call('GET', KEYS[8])
if tonumber(total) == tonumber(ARGV[14]) then
  redis.call('SET', KEYS[8], 1)
  redis.call('SET', KEYS[9], 1)
else
  redis.call('INCR', KEYS[8])
  redis.call('INCR', KEYS[9])
end
return res
