-- A done key's compact mark (internal/mark): once its full record has
-- expired (the result TTL), the mark still refuses a repeat until the done
-- TTL ends, and still tells a duplicate from a conflict.
-- reg -> the registry, onceq:{<home>}:mark:<ns>/ (dedup/keys.go markKey): a
--        hash, done TTL in ms -> the end of the latest bucket holding a
--        mark under it (ms), which every mark under it ends before
-- id  -> the key's mark id (keys.go markID): 4 hex digits of its sub-hash,
--        then its 12-byte digest, the mark's field
-- A mark is a field of the hash <reg><sub>:<done TTL ms>:<bucket>, the bucket
-- of its expiry e at span g = ceil(done TTL / 2): the hash expires whole at
-- the bucket's end, so a lookup reads at most 3 buckets per done TTL, and
-- the small hashes stay listpack-encoded. Its value is 8 bytes: a 4-byte
-- digest of the fingerprint ("\0\0\0\0" for none) and e minus the bucket's
-- start (ms, big-endian), so a mark ends to the millisecond.
-- Times are the caller's clock (ms), as the record's stamps.
-- The file is in parts, each from its "-- @<part>:" line: a script takes
-- this first one and the part it calls (mark.go), no more, as every
-- function a script defines is a closure made at each of its runs.
local MARK_NONE = '\0\0\0\0'

-- onceq_marks(reg): whether reg names a registry. "" or a name ending in
-- '}' (onceq:{<home>}, in the key's slot for Redis Cluster) stands for none.
local function onceq_marks(reg)
  return reg and reg ~= '' and string.sub(reg, -1) ~= '}'
end

-- onceq_u32(n): n as 4 bytes, big-endian, by the struct library where
-- Redis has it, by hand on miniredis (the embedded default), which has
-- none: the same bytes.
local function onceq_u32(n)
  local st = rawget(_G, 'struct')
  if st then
    return st.pack('>I4', n)
  end
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

-- onceq_fpd(fp): the fingerprint's 4-byte digest, the first 4 bytes of its
-- SHA-1 (dedup/keys.go markFP, which the worker's completion passes in its
-- place); MARK_NONE for none.
local function onceq_fpd(fp)
  if fp == '' then
    return MARK_NONE
  end
  return onceq_u32(tonumber(string.sub(redis.sha1hex(fp), 1, 8), 16))
end

-- @write: what a completion runs.
-- onceq_mark_put(reg, dur, key, field, fpd, off, pttl, ends): the key,
-- whose fingerprint's digest is fpd (onceq_fpd), is remembered by its mark
-- in the hash key (its bucket's, "<reg><sub>:<dur>:<bucket>") as field,
-- with value fpd .. off, until the bucket's end, ends (ms), pttl ms from
-- now. Go works the slot out (mark.go At; onceq_mark_get works the same
-- buckets out itself): number to string and back are sprintf and strtod,
-- a few thousand instructions each, and every completion runs this. A
-- bucket's first mark sets its expiry (NX) and names it in the registry
-- (dur, the done TTL as a decimal string, its field); the others are two
-- calls, HSET and PEXPIRE.
local function onceq_mark_put(reg, dur, key, field, fpd, off, pttl, ends)
  redis.call('HSET', key, field, fpd .. off)
  if redis.call('PEXPIRE', key, pttl, 'NX') == 0 then
    return -- not the bucket's first mark: the registry names it
  end
  local cur = redis.call('HGET', reg, dur)
  -- Decimal ms of as many digits compare as strings.
  if not cur or #cur < #ends or (#cur == #ends and cur < ends) then
    redis.call('HSET', reg, dur, ends)
    if redis.call('PTTL', reg) < tonumber(pttl) then
      redis.call('PEXPIRE', reg, pttl)
    end
  end
end

-- @read: what a lookup runs.
-- onceq_mark_get(reg, id, fp, at, hd, h0, h1, h2): nil when the key has
-- no live mark (or reg names none), else whether fp is the marked content
-- (either "" counts as the same), when the job was done and when the
-- mark ends (ms). A live mark is in one of the 3 buckets from now's on,
-- per done TTL the registry names with a bucket ending after now. hd,
-- when given, is a done TTL the caller expects and h0..h2 its buckets'
-- hashes, named in full (mark.go Lookup): worked out in Go, as a number
-- to string and back costs thousands of instructions in Lua.
local function onceq_mark_get(reg, id, fp, at, hd, h0, h1, h2)
  if not onceq_marks(reg) then
    return nil
  end
  local now
  local ds = redis.call('HGETALL', reg)
  local field = string.sub(id, 5)
  for i = 1, #ds, 2 do
    local ends = ds[i + 1]
    -- Decimal ms of as many digits compare as strings.
    if (#ends == #at and ends > at) or (#ends ~= #at and tonumber(ends) > tonumber(at)) then
      local hinted = ds[i] == hd
      local d, g, b0, prefix
      if not hinted then
        now = now or tonumber(at)
        d = tonumber(ds[i])
        g = math.ceil(d / 2)
        b0 = math.floor(now / g)
        prefix = reg .. string.sub(id, 1, 4) .. ':' .. ds[i] .. ':'
      end
      for k = 0, 2 do
        local key
        if hinted then
          key = (k == 0 and h0) or (k == 1 and h1) or h2
        else
          key = prefix .. string.format('%d', b0 + k)
        end
        local v = redis.call('HGET', key, field)
        if v then
          if hinted then
            now = now or tonumber(at)
            d = tonumber(ds[i])
            g = math.ceil(d / 2)
            b0 = math.floor(now / g)
          end
          local x1, x2, x3, x4 = string.byte(v, 5, 8)
          local e = (b0 + k) * g + ((x1 * 256 + x2) * 256 + x3) * 256 + x4
          if e > now then
            local s = string.sub(v, 1, 4)
            return s == MARK_NONE or fp == '' or s == onceq_fpd(fp), e - d, e
          end
        end
      end
    end
  end
  return nil
end

-- onceq_mark_word(same, at): the mark as a script answers it in place of a
-- record (dedup/record.go reads it): "m|<1 same, 0 other>|<done at ms>".
local function onceq_mark_word(same, at)
  return 'm|' .. (same and '1' or '0') .. '|' .. string.format('%d', at)
end

-- @del: what forgets a key.
-- onceq_mark_del(reg, id, now): the key's marks go; returns how many.
local function onceq_mark_del(reg, id, at)
  if not onceq_marks(reg) then
    return 0
  end
  local now = tonumber(at)
  local n = 0
  local ds = redis.call('HGETALL', reg)
  local field = string.sub(id, 5)
  for i = 1, #ds, 2 do
    if tonumber(ds[i + 1]) > now then
      local g = math.ceil(tonumber(ds[i]) / 2)
      local b0 = math.floor(now / g)
      local prefix = reg .. string.sub(id, 1, 4) .. ':' .. ds[i] .. ':'
      for b = b0, b0 + 2 do
        n = n + redis.call('HDEL', prefix .. string.format('%d', b), field)
      end
    end
  end
  return n
end
