-- The workers' sweep of the successors hash: starts each listed key's
-- successor whose run has ended (promote.lua, defined above).
-- KEYS[1] -> onceq:successors
-- KEYS[2+7i .. 8+7i] -> entry i: the task hash, the queue's pending list,
--   archived and completed sets, the record, the successor and the history
--   (promote's task, pending, archived, completed, rec, nxt, hist)
-- ARGV[1] -> now, Unix ns
-- ARGV[2] -> the head of the history's entries (history.Head)
-- ARGV[3+2i], ARGV[4+2i] -> entry i's field (namespace/id) and task id
-- Returns, per entry, promote's answer: 1 started, 0 gone, -1 still running.
local out = {}
local n = (#ARGV - 2) / 2
for i = 0, n - 1 do
  local k = 2 + 7 * i
  out[i + 1] = promote(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6],
    KEYS[1], ARGV[3 + 2 * i], ARGV[4 + 2 * i], ARGV[1], ARGV[2])
end
return out
