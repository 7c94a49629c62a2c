-- Read a key's record for Status, or its compact mark when the record has
-- expired.
-- KEYS[1] -> onceq:{<home>}:ns/id:rec, the packed record
-- KEYS[2] -> onceq:{<home>}:mark:<ns>/, the key's mark registry (absent: none)
-- ARGV[1] -> the key's mark id
-- ARGV[2] -> now in ms
-- ARGV[3] -> a fingerprint the mark's word tells same or other ("": same)
-- Returns: {record, pttl}, with the mark's end (ms) for a done record
-- that has one; {mark word (onceq_mark_word), -1, the mark's end}; or {}
-- for neither.
local v = redis.call('GET', KEYS[1])
local same, at, e = onceq_mark_get(KEYS[2], ARGV[1], ARGV[3] or '', ARGV[2])
if v then
  if string.sub(v, 1, 2) == 'd|' and e then
    return {v, redis.call('PTTL', KEYS[1]), e}
  end
  return {v, redis.call('PTTL', KEYS[1])}
end
if same ~= nil then
  return {onceq_mark_word(same, at), -1, e}
end
return {}
