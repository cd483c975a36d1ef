-- Deletes each of KEYS[*] that still starts with token ARGV[1]; keys held
-- by someone else are left alone. ARGV[1+i] names the queue of fair waiters
-- of KEYS[i] (see acquire_fair.lua), in KEYS[i]'s cluster slot; it is not
-- declared, so that a release touches one declared key per lock key, as
-- before queues, while a cluster slot migrates. Returns 1 if all were ours,
-- else 0.
-- A deleted key whose queue has a live waiter is handed to it at once, for
-- its short grant lease, which the waiter confirms (grant, from grant.lua).
-- Any other deleted key is announced on "lockmacro:released:<key>" with an
-- empty message, so that waiters retry at once instead of polling (a PUBLISH
-- nobody listens to costs one dictionary lookup). The caller's own queue entry, if
-- any, is removed: a waiter that gives up leaves the queue this way.
-- redis.pcall: a user whose ACL denies the channel still releases; its
-- waiters then wait by backoff.
local token = ARGV[1]
local all = 1
local now
-- Queue entries read at a time.
local CHUNK = 16
for i = 1, #KEYS do
  local key, queue = KEYS[i], ARGV[1 + i]
  local value = redis.call('GET', key)
  local owned = value and string.sub(value, 1, #token) == token
  if owned then
    redis.call('DEL', key)
  else
    all = 0
  end
  local granted = false
  -- The queue is read a few entries at a time from the front: an owner
  -- stops at the first live waiter, so a release costs the same with ten
  -- waiters queued as with ten thousand. LRANGE of a missing queue is as
  -- cheap as EXISTS, and one command fewer for a restricted user to be
  -- granted. An empty name: the key can have no queue (on a cluster, one
  -- would be in another slot).
  local from, done = 0, queue == ''
  while not done do
    local entries = redis.pcall('LRANGE', queue, from, from + CHUNK - 1)
    if entries.err then
      -- Not a list (written by someone else): no queue, rather than an
      -- error after the DEL above, which Redis would not undo.
      entries = {}
    end
    if #entries > 0 and not now then
      local time = redis.call('TIME')
      now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    end
    local removed = 0
    for _, raw in ipairs(entries) do
      local entry = cjson.decode(raw)
      local mine = string.sub(entry.v, 1, #token) == token
      if entry.e <= now or mine then
        redis.call('LREM', queue, 1, raw)
        removed = removed + 1
        -- A waiter leaving has one entry: found, the rest can wait.
        done = mine and not owned
      elseif owned then
        redis.call('LREM', queue, 1, raw)
        removed = removed + 1
        -- An entry whose fence counter cannot be used is dropped, changing
        -- nothing else; the next one is handed the key instead.
        granted = grant(key, entry) ~= false
        -- An owner has no entry of its own left: the rest can wait.
        done = granted
      end
      if done then
        break
      end
    end
    done = done or #entries < CHUNK
    -- Entries removed from this chunk moved the next ones forward.
    from = from + CHUNK - removed
  end
  if owned and not granted then
    redis.pcall('PUBLISH', 'lockmacro:released:' .. key, '')
  end
end
return all
