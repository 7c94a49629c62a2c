-- A done key's compact mark (internal/mark): once its full record has
-- expired (the result TTL), the mark still refuses a repeat until the done
-- TTL ends, and still tells a duplicate from a conflict.
-- reg -> the registry, onceq:{<home>}:mark:<ns>/ (dedup/keys.go markKey): a
--        hash, done TTL in ms -> the latest expiry of a mark under it (ms)
-- id  -> the key's mark id (keys.go markID): 4 hex digits of its sub-hash,
--        then its 12-byte digest, the mark's field
-- A mark is a field of the hash <reg><sub>:<done TTL ms>:<bucket>, the bucket
-- of its expiry e at span g = ceil(done TTL / 2): the hash expires whole at
-- the bucket's end, so a lookup reads at most 3 buckets per done TTL, and
-- the small hashes stay listpack-encoded. Its value is 8 bytes: a 4-byte
-- digest of the fingerprint ("\0\0\0\0" for none) and e minus the bucket's
-- start (ms, big-endian), so a mark ends to the millisecond.
-- Times are the caller's clock (ms), as the record's stamps.
local MARK_NONE = '\0\0\0\0'

-- onceq_marks(reg): whether reg names a registry. "" or a name ending in
-- '}' (onceq:{<home>}, in the key's slot for Redis Cluster) stands for none.
local function onceq_marks(reg)
  return reg and reg ~= '' and string.sub(reg, -1) ~= '}'
end

-- 4 bytes big-endian, by hand: miniredis (the embedded default) has no
-- struct library.
local function onceq_u32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

local function onceq_u32at(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function onceq_fpd(fp)
  if fp == '' then
    return MARK_NONE
  end
  return onceq_u32(tonumber(string.sub(redis.sha1hex(fp), 1, 8), 16))
end

local function onceq_mark_bucket(reg, id, d, b)
  return reg .. string.sub(id, 1, 4) .. ':' .. string.format('%.0f', d) .. ':' .. string.format('%.0f', b)
end

-- onceq_mark_put(reg, id, fp, at, dur): the key is remembered by its mark
-- until at + dur (ms).
local function onceq_mark_put(reg, id, fp, at, dur)
  -- New locals, not the parameters reassigned: gopher-lua (miniredis)
  -- loses a parameter reassigned in a multiple assignment.
  local d = tonumber(dur)
  local now = tonumber(at)
  local g = math.ceil(d / 2)
  local e = now + d
  local b = math.floor(e / g)
  local key = onceq_mark_bucket(reg, id, d, b)
  redis.call('HSET', key, string.sub(id, 5), onceq_fpd(fp) .. onceq_u32(e - b * g))
  local ttl = (b + 1) * g - now
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
  local f = string.format('%.0f', d)
  if tonumber(redis.call('HGET', reg, f) or '0') < e then
    redis.call('HSET', reg, f, string.format('%.0f', e))
  end
  if redis.call('PTTL', reg) < d then
    redis.call('PEXPIRE', reg, d)
  end
end

-- onceq_mark_each(reg, id, now, fn): fn(bucket key, field, d, g, b) for
-- every bucket that may hold a live mark of the key; a true return stops.
local function onceq_mark_each(reg, id, now, fn)
  local ds = redis.call('HGETALL', reg)
  local field = string.sub(id, 5)
  for i = 1, #ds, 2 do
    if tonumber(ds[i + 1]) > now then
      local d = tonumber(ds[i])
      local g = math.ceil(d / 2)
      local b0 = math.floor(now / g)
      for b = b0, b0 + 2 do
        if fn(onceq_mark_bucket(reg, id, d, b), field, d, g, b) then
          return
        end
      end
    end
  end
end

-- onceq_mark_get(reg, id, fp, at): nil when the key has no live mark (or
-- reg is nil or ""), else whether fp is the marked content (either "" counts as
-- the same), when the job was done and when the mark ends (ms).
local function onceq_mark_get(reg, id, fp, at)
  if not onceq_marks(reg) then
    return nil
  end
  local now = tonumber(at)
  local same, at, ends
  onceq_mark_each(reg, id, now, function(key, field, d, g, b)
    local v = redis.call('HGET', key, field)
    if not v then
      return false
    end
    local e = b * g + onceq_u32at(v, 5)
    if e <= now then
      return false
    end
    local s = string.sub(v, 1, 4)
    same, at, ends = s == MARK_NONE or fp == '' or s == onceq_fpd(fp), e - d, e
    return true
  end)
  return same, at, ends
end

-- onceq_mark_del(reg, id, now): the key's marks go; returns how many.
local function onceq_mark_del(reg, id, now)
  if not onceq_marks(reg) then
    return 0
  end
  local n = 0
  onceq_mark_each(reg, id, tonumber(now), function(key, field)
    n = n + redis.call('HDEL', key, field)
    return false
  end)
  return n
end

-- onceq_mark_word(same, at): the mark as a script answers it in place of a
-- record (dedup/record.go reads it): "m|<1 same, 0 other>|<done at ms>".
local function onceq_mark_word(same, at)
  return 'm|' .. (same and '1' or '0') .. '|' .. string.format('%.0f', at)
end
