-- Deletes each of KEYS[*] that still starts with token ARGV[1]; keys held
-- by someone else are left alone. With n keys, ARGV[1 + i] names the queue
-- of fair waiters of KEYS[i] (see acquire_fair.lua) and ARGV[1 + n + i] its
-- waiters flag (see waiters.lua), both in KEYS[i]'s cluster slot; they are
-- not declared, so that a release touches one declared key per lock key, as
-- before queues, while a cluster slot migrates. Returns 1 if all were ours,
-- else 0.
-- When the flag says nobody waits, that is all: GET and DEL, and one GET of
-- the flag. Else a deleted key whose queue has a live waiter is handed to
-- it at once, for its short grant lease, which the waiter confirms (grant,
-- from grant.lua), and any other deleted key is announced on
-- "lockmacro:released:<key>" with an empty message, so that waiters retry at
-- once instead of polling. The caller's own queue entry, if any, is removed:
-- a waiter that gives up leaves the queue this way.
-- redis.pcall: a user whose ACL denies the channel still releases; its
-- waiters then wait by backoff.
local token = ARGV[1]
local n = #KEYS
local all = 1
local now
-- Queue entries a leaving waiter reads at a time.
local CHUNK = 16

local function clock()
  if not now then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return now
end

-- An owner hands the key to the first live entry, popping it and the dead
-- ones before it: the cost does not grow with the waiters behind it.
local function hand_over(key, queue)
  while true do
    local raw = redis.pcall('LPOP', queue)
    -- Missing (false) or not a list (an error, written by someone else): no
    -- queue, rather than an error after the DEL above, which Redis would
    -- not undo.
    if type(raw) ~= 'string' then
      return false
    end
    local entry = cjson.decode(raw)
    -- An entry whose fence counter cannot be used is dropped, changing
    -- nothing else; the next one is handed the key instead.
    if entry.e > clock() and string.sub(entry.v, 1, #token) ~= token
        and grant(key, entry) then
      return true
    end
  end
end

-- A waiter that gives up removes its own entry, wherever it is, and the
-- dead ones it passes.
local function leave(queue)
  local from = 0
  while true do
    local entries = redis.pcall('LRANGE', queue, from, from + CHUNK - 1)
    if entries.err or #entries == 0 then
      return
    end
    local removed = 0
    for _, raw in ipairs(entries) do
      local entry = cjson.decode(raw)
      local mine = string.sub(entry.v, 1, #token) == token
      if mine or entry.e <= clock() then
        redis.call('LREM', queue, 1, raw)
        removed = removed + 1
        -- A waiter has one entry: found, the rest can wait.
        if mine then
          return
        end
      end
    end
    if #entries < CHUNK then
      return
    end
    -- Entries removed from this chunk moved the next ones forward.
    from = from + CHUNK - removed
  end
end

for i = 1, n do
  local key, queue, flag = KEYS[i], ARGV[1 + i], ARGV[1 + n + i] or ''
  local value = redis.call('GET', key)
  local owned = value and string.sub(value, 1, #token) == token
  if owned then
    redis.call('DEL', key)
  else
    all = 0
  end
  -- An empty queue name: the key can have no queue (on a cluster, one would
  -- be in another slot).
  if awaited(flag) then
    if owned then
      if queue == '' or not hand_over(key, queue) then
        redis.pcall('PUBLISH', 'lockmacro:released:' .. key, '')
      end
    elseif queue ~= '' then
      leave(queue)
    end
  end
end
return all
