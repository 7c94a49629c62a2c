-- End a run: done with its result (Complete) or failed with its cause (Release).
-- Its keys are KEYS[KO + 1..3] and its arguments ARGV[AO + 1..13]: KO and AO
-- are 0 when it runs alone (scripts.go), and count asynq's own in the joined
-- acknowledgement (ack.lua), which so hands it no table of its own.
-- KEYS[1] -> onceq:{<home>}:ns/id:rec, the packed record
-- ARGV[1] -> the holder's prefix "r|<token>|<owner>|"
-- ARGV[2] -> new state: "d" done or "f" failed
-- ARGV[3] -> now in ms (worker's clock: completed/updated stamp)
-- ARGV[4] -> result (done) or cause (failed)
-- ARGV[5] -> TTL in ms: done TTL or failed TTL
-- KEYS[2] -> onceq:{<home>}:ns/id:hist, the key's history, with
-- ARGV[6] -> its entry for this end (internal/history): a done key's history
--            lives as long as its record, without the entries of its claims;
--            a failed run's at least the failed TTL (a retry may follow)
-- KEYS[3] -> onceq:{<home>}:mark:<ns>/, the key's mark registry
--            (internal/mark), with
-- ARGV[7] -> the hash of the key's mark's bucket, named in full (mark.go
--            Slot: "<registry><sub>:<done TTL ms>:<bucket>") and
-- ARGV[8] -> the result TTL in ms: a done record then lives this long and
--            its compact mark to the done TTL. KEYS[3] absent or "": no mark.
-- ARGV[9] -> the fingerprint's digest (internal/mark onceq_fpd), when the
--            caller knows the fingerprint: "" or absent, read from the record
-- ARGV[10..13] -> the rest of the mark's slot (mark.go Slot): its field, the
--            4 bytes after the digest, the bucket's time left and end in ms
-- Returns: 1 written, 0 when the hold is not current (lease lost: nothing written).
local v = redis.call('GET', KEYS[KO + 1])
if not v or string.find(v, ARGV[AO + 1], 1, true) ~= 1 then -- no substring made
  return 0
end
-- Keep token, owner (the holder's prefix), attempts, first seen and
-- fingerprint, v from its second byte to e; replace the updated stamp and
-- the grace with the new stamp and tail. Plain finds from the prefix on,
-- and one substring: a pattern's captures and each substring are strings
-- Lua makes and then collects.
local a = string.find(v, '|', #ARGV[AO + 1] + 1, true)
local f = string.find(v, '|', a + 1, true)
local e = string.find(v, '|', f + 1, true)
local ttl = ARGV[AO + 5]
if ARGV[AO + 2] == 'd' and onceq_marks(KEYS[KO + 3]) then
  ttl = ARGV[AO + 8]
  local fpd = ARGV[AO + 9]
  if not fpd or fpd == '' then
    fpd = onceq_fpd(string.sub(v, f + 1, e - 1))
  end
  onceq_mark_put(KEYS[KO + 3], ARGV[AO + 5], ARGV[AO + 7], ARGV[AO + 10], fpd, ARGV[AO + 11], ARGV[AO + 12], ARGV[AO + 13])
end
redis.call('SET', KEYS[KO + 1], ARGV[AO + 2] .. string.sub(v, 2, e) .. ARGV[AO + 3] .. '|' .. ARGV[AO + 4], 'PX', ttl)
if KEYS[KO + 2] then
  onceq_history(KEYS[KO + 2], ARGV[AO + 6], ARGV[AO + 5], ARGV[AO + 2] == 'd' and 'done' or 'max', true)
end
return 1
