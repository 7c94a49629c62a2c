-- Rewrite a record of onceq's first layout (a hash) as the packed string,
-- keeping its state, token, owner, attempts, fingerprint, result and TTL.
-- KEYS[1] -> onceq:{ns/id}:rec
-- Returns: 1 rewritten, 0 when the key holds no hash (nothing to do).
-- A running record keeps its lease end: grace = TTL left - lease left.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'own', 'att', 'fs', 'fp', 'ua', 'lu', 'res', 'ca', 'err')
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  pttl = 1 -- every record has a TTL; one without is let go at once
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local function s(v) return (v or ''):gsub('|', '_') end
local head = string.format('|%s|%s|%s|%s|%s|', r[2] or '0', s(r[3]), r[4] or '1', r[5] or '0', s(r[6]))
local v
if r[1] == 'done' then
  v = 'd' .. head .. (r[10] or r[7] or '0') .. '|' .. (r[9] or '')
elseif r[1] == 'running' then
  local grace = math.max(pttl - math.max((tonumber(r[8]) or 0) - now, 0), 0)
  v = 'r' .. head .. (r[7] or '0') .. '|' .. string.format('%.0f', grace)
else
  v = 'f' .. head .. (r[7] or '0') .. '|' .. (r[11] or '')
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[1], v, 'PX', pttl)
return 1
