-- onceq's completion, run before asynq's acknowledgement of the task in the
-- same call (join.go defines finish.lua as finish, kept (true for asynq's
-- mark-as-complete, which keeps the task's hash; false for done, which
-- deletes it), and asynq's script, unchanged, as asynq_ack above this).
-- KEYS[1..n-4], ARGV[1..m-13] -> asynq's own
-- KEYS[n-3] -> the task's hash, asynq:{<queue>}:t:<id>, where asynq keeps it
--             (kept); else another key of the queue's slot, unread
-- KEYS[n-2] -> the task's idempotency record
-- KEYS[n-1] -> the key's history
-- KEYS[n]   -> the key's mark registry (onceq:{<home>}: no mark)
-- ARGV[m-12..m] -> finish.lua's: holder prefix, "d", now ms, result, done
--   TTL ms, the history's entry, the mark's hash, the result TTL ms, the
--   fingerprint's digest, the mark's field, offset, time left and end
-- Returns asynq's reply when the record was written and asynq's reply is
-- its OK (the usual case: Redis builds no array), else {finish's reply (1
-- written, 0 lease lost), asynq's reply}. The record is written even when
-- asynq's reply is an error: the handler ran.
-- onceq's fields leave a task's hash that asynq keeps for its retention.
local n, m = #KEYS, #ARGV
local done = finish(n - 3, m - 13) -- its keys and arguments where they are
local reply = asynq_ack()
if kept then
  redis.call('HDEL', KEYS[n-3], 'onceq_rec', 'onceq_fp', 'onceq_hist', 'onceq_inc', 'onceq_mark')
end
if done == 1 and type(reply) == 'table' and reply.ok then
  return reply
end
return {done, reply}
