-- Delete tasks of one queue (Producer.Purge), each in every state but
-- active: a running task stays for asynq to acknowledge.
-- KEYS[1..5] -> asynq:{<queue>}:pending, scheduled, retry, archived, completed
-- KEYS[6..]  -> asynq:{<queue>}:t:<id>, the tasks' hashes
-- Returns {deleted, active}: how many went, how many were running.
local sets = {scheduled = KEYS[2], retry = KEYS[3], archived = KEYS[4], completed = KEYS[5]}
local deleted, active = 0, 0
for i = 6, #KEYS do
  local state = redis.call('HGET', KEYS[i], 'state')
  if state == 'active' then
    active = active + 1
  elseif state then
    local id = string.match(KEYS[i], ':t:(.*)$')
    if state == 'pending' then
      redis.call('LREM', KEYS[1], 0, id)
    elseif sets[state] then
      redis.call('ZREM', sets[state], id)
    end
    deleted = deleted + redis.call('DEL', KEYS[i])
  end
end
return {deleted, active}
