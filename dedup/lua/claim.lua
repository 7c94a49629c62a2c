-- Claim an idempotency key for one run.
-- KEYS[1] -> onceq:{ns/id}:rec, the record hash
-- ARGV[1] -> fingerprint of the payload ("" skips the mismatch check)
-- ARGV[2] -> lease in ms
-- ARGV[3] -> owner (host/pid of the claiming worker)
-- ARGV[4] -> record TTL while running, in ms (lease + grace)
-- Returns:
--   {1, token, attempt, lease_until_ms}  acquired
--   {2, result, completed_at_ms}         duplicate: done
--   {3, lease_until_ms, owner}           in progress: another lease is live
--   {4, stored_fingerprint}              mismatch
-- Time is Redis's own (TIME), so every worker agrees on lease deadlines.
-- Tokens are max(previous + 1, now in µs): they grow even after the record
-- expired, so a stale holder can never match a later token.
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local now_us = t[1] * 1000000 + t[2]
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok', 'lu', 'fp', 'res', 'ca', 'own', 'att')
local st = rec[1]
if st then
  if ARGV[1] ~= '' and rec[4] and rec[4] ~= '' and rec[4] ~= ARGV[1] then
    return {4, rec[4]}
  end
  if st == 'done' then
    return {2, rec[5] or '', tonumber(rec[6]) or 0}
  end
  if st == 'running' and (tonumber(rec[3]) or 0) > now_ms then
    return {3, tonumber(rec[3]), rec[7] or ''}
  end
end
local tok = math.max((tonumber(rec[2]) or 0) + 1, now_us)
local lu = now_ms + tonumber(ARGV[2])
local att = (tonumber(rec[8]) or 0) + 1
redis.call('HSET', KEYS[1],
  'st', 'running', 'tok', string.format('%.0f', tok), 'lu', string.format('%.0f', lu),
  'own', ARGV[3], 'att', att, 'ua', string.format('%.0f', now_ms))
if not st then
  redis.call('HSET', KEYS[1], 'fs', string.format('%.0f', now_ms), 'fp', ARGV[1])
elseif ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, tok, att, lu}
