-- Forget a key: its record, its window and its compact mark.
-- KEYS[1] -> onceq:{<home>}:ns/id:rec, KEYS[2] -> onceq:{<home>}:ns/id:win
-- KEYS[3] -> onceq:{<home>}:mark:<ns>/, the key's mark registry (internal/mark)
-- ARGV[1] -> the key's mark id
-- ARGV[2] -> now in ms
-- Returns: how many were there.
return redis.call('DEL', KEYS[1], KEYS[2]) + onceq_mark_del(KEYS[3], ARGV[1], ARGV[2])
