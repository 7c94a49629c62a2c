-- Claim a key whose record exists (the first claim is a plain SET NX PX GET),
-- and record an acquired claim in the key's history.
-- KEYS[1] -> onceq:{<home>}:ns/id:rec, the packed record (see record.go)
-- KEYS[2] -> onceq:{<home>}:ns/id:hist, the key's history (internal/history)
-- ARGV[1] -> fingerprint of the payload ("" skips the mismatch check and keeps
--            the stored one)
-- ARGV[2] -> owner: the delivery making the claim
-- ARGV[3] -> proposed token (the worker's clock in µs)
-- ARGV[4] -> now in ms, worker's clock (first seen / updated stamps only)
-- ARGV[5] -> lease in ms
-- ARGV[6] -> grace in ms: how long a running record outlives its lease
-- ARGV[7] -> "1" when the claim is re-entrant for its owner (same delivery)
-- ARGV[8] -> the history's entry of an acquired claim
-- KEYS[3] -> onceq:{<home>}:mark:<ns>/, the key's mark registry
--            (internal/mark; absent: no mark is looked for), with
-- ARGV[9] -> the key's mark id
-- Returns:
--   {1, token, attempt, first_seen_ms}  acquired
--   {0, record, pttl_ms}                not acquired: done (a duplicate, or a
--                                       mismatch the caller tells) or a live lease;
--                                       record is the mark's word (onceq_mark_word,
--                                       pttl -1) for a key its mark alone remembers
-- A running record's lease is live while PTTL > its grace (the last field):
-- Redis's clock alone decides. Tokens are max(stored + 1, proposed).
-- Another fingerprint is a mismatch only against a done record: a failed one
-- or an expired lease is taken over and the new fingerprint stored (a new
-- incarnation with a corrected payload); a live lease makes it wait, and is
-- never re-entered by it.
local tok, att, fs, fp = tonumber(ARGV[3]), 1, ARGV[4], ARGV[1]
local v = redis.call('GET', KEYS[1])
if v then
  local st, otok, own, oatt, ofs, ofp, _, tail =
    string.match(v, '^(%a)|(%d+)|([^|]*)|(%d+)|(%d+)|([^|]*)|(%d+)|(.*)$')
  if not st then
    return redis.error_reply('ERR onceq: unreadable record')
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if st == 'd' then
    return {0, v, pttl}
  end
  local live = st == 'r' and pttl > tonumber(tail)
  local same = ARGV[1] == '' or ofp == '' or ofp == ARGV[1]
  local again = live and same and ARGV[7] == '1' and own == ARGV[2]
  if live and not again then
    return {0, v, pttl}
  end
  tok = math.max(tonumber(otok) + 1, tok)
  att = tonumber(oatt)
  if not again then
    att = att + 1
  end
  fs = ofs
  if fp == '' then
    fp = ofp
  end
elseif KEYS[3] then
  local same, at = onceq_mark_get(KEYS[3], ARGV[9], ARGV[1], ARGV[4])
  if same ~= nil then
    return {0, onceq_mark_word(same, at), -1}
  end
end
redis.call('SET', KEYS[1],
  string.format('r|%.0f|%s|%d|%s|%s|%s|%s', tok, ARGV[2], att, fs, fp, ARGV[4], ARGV[6]),
  'PX', tonumber(ARGV[5]) + tonumber(ARGV[6]))
onceq_history(KEYS[2], ARGV[8], tonumber(ARGV[5]) + tonumber(ARGV[6]), 'max', true)
return {1, tok, att, tonumber(fs)}
