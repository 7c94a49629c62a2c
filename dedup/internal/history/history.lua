-- onceq_history(key, entry, ttl, how, existing): a key's history gains entry, in the
-- same script as the decision it records. Every script that decides about a
-- key appends through this function (Go prepends it, with HISTORY_KEEP).
-- key   -> onceq:{<home>}:ns/id:hist, a string: entries newest first, one per line
-- entry -> one entry, built by internal/history (Pack, or Head and a tail of
--          the same layout: "<decision>|<incarnation>|<reason>", the
--          decision as its code: history.Codes)
-- ttl   -> ms
-- how   -> 'max': the history lives at least ttl more (a decision that keeps
--          the key: an insert, a claim, a failed run);
--          'keep': its TTL stays, ttl is for a history that had none (a
--          refusal: it does not make the key remembered longer);
--          'done': the run is over: the entries of its claims ('a', acquired)
--          leave, and the history lives exactly ttl, as the done record.
-- existing -> true: only a history that exists gains it (the worker's
--          decisions: a type keeps a history when its producer starts one).
-- A key "" or "onceq:{<home>}" (ending in '}': named in the key's slot, for
-- Redis Cluster, and never written) keeps nothing: a type that keeps no
-- history (Spec.History). At most HISTORY_KEEP entries are kept: the oldest
-- leave first.
local function onceq_keeps(key)
  return key ~= '' and string.sub(key, -1) ~= '}'
end

local function onceq_history(key, entry, ttl, how, existing)
  if not onceq_keeps(key) then
    return -- a type that keeps no history (Spec.History)
  end
  local old = redis.call('GET', key)
  if existing and not old then
    return -- the worker adds to a history the producer started
  end
  local lines = {entry}
  ttl = math.max(tonumber(ttl) or 1, 1)
  if old then
    for l in string.gmatch(old, '[^\n]+') do
      if #lines >= HISTORY_KEEP then
        break
      end
      if how ~= 'done' or not string.find(l, '^%w+|[^|]*|[^|]*|a|') then
        lines[#lines + 1] = l
      end
    end
    if how ~= 'done' then
      local left = redis.call('PTTL', key)
      if (how == 'keep' and left > 0) or left > ttl then
        ttl = left
      end
    end
  end
  redis.call('SET', key, table.concat(lines, '\n'), 'PX', ttl)
end
