-- The body of announce(token, awaited), which release.lua calls, after it
-- deleted the keys, for the keys someone may wait for (`awaited`: {i,
-- owned, flag}, KEYS[i], what this release gave back of it, and its waiters
-- flag, named or derived). fence.lua and
-- grant.lua come before this, inside the same function: a release that
-- nobody waits for does not even define them; leases.lua (server_now)
-- comes before the function.
-- Queue entries a leaving waiter reads at a time.
local CHUNK = 16

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
    if entry.e > server_now() and string.sub(entry.v, 1, #token) ~= token
        and grant(key, entry) then
      return true
    end
  end
end

-- A released permit goes to the first live entries, each waiting for one of
-- entry.p permits, for as long as that many are not held: the line is
-- served before anyone who comes later.
local function hand_over_permits(key, queue)
  local granted = false
  while true do
    local raw = redis.pcall('LINDEX', queue, 0)
    if type(raw) ~= 'string' then
      return granted
    end
    local entry = cjson.decode(raw)
    local live = entry.e > server_now() and string.sub(entry.v, 1, #token) ~= token
    if live and (not entry.p or set_shares(key, server_now()) >= entry.p) then
      return granted
    end
    redis.call('LPOP', queue)
    if live and grant(key, entry) then
      granted = true
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
      if mine or entry.e <= server_now() then
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

for _, pair in ipairs(awaited) do
  -- `owned`: 'lock', a share ('permit', whose waiters may queue, or
  -- 'write') or nil.
  local i, owned, flag = pair[1], pair[2], pair[3]
  local key = KEYS[i]
  -- The queue is named as the flag is, with another suffix (see
  -- `derived_queue_key`); none when the key can have no flag.
  local queue = ''
  if flag ~= '' then
    queue = string.sub(flag, 1, -#'waiters' - 1) .. 'queue'
  end
  if owned then
    local handed = false
    if queue ~= '' and owned == 'lock' then
      handed = hand_over(key, queue)
    elseif queue ~= '' and owned == 'permit' then
      handed = hand_over_permits(key, queue)
    end
    -- Waiters that do not queue (for a lock, a permit or a read) are woken
    -- as well, even when the line was served: a permit may be left.
    if not handed or owned ~= 'lock' then
      redis.pcall('PUBLISH', 'lockmacro:released:' .. key, '')
    end
  elseif queue ~= '' then
    leave(queue)
  end
end
