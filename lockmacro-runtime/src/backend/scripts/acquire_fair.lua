-- A fair attempt to take KEYS[1] for ARGV[2] ms with value ARGV[1] (the
-- 32-character token, then metadata). KEYS[2], when present, is the fence
-- counter: incremented (next_fence, from fence.lua), returned, and kept for
-- ARGV[5] ms after this use. ARGV[3] = how long this waiter stays queued,
-- in ms (0: do not queue). ARGV[4] names the key's queue of waiters, in
-- KEYS[1]'s cluster slot (undeclared, as in release.lua). ARGV[6] = this
-- waiter's grant lease in ms (see grant.lua). ARGV[7] = the key's waiters
-- flag (see waiters.lua), which a waiter that joins or stays in the queue
-- sets for as long as its entry lives. ARGV[8] = the number of this attempt
-- within the waiter's obtain (0: not counted), written into its entry, so
-- that a grant names the last attempt that found the waiter in line and the
-- waiter knows the grant came after that attempt was sent.
-- The queue is a list, oldest first, of cjson entries {v = value, t = ttl ms,
-- e = expiry (server time, ms), f = fence key or '', g = grant lease ms,
-- x = fence counter expiry ms, n = attempt number or absent}; release.lua
-- hands the key to its first live
-- entry (grant, from grant.lua). Entries past their expiry are dropped.
-- Returns {1, fence or 0} when taken, {0, 1, ms} when not, ms being how long
-- to wait at most before trying again (the holder's lease, or the grant
-- lease of the waiter the key was just handed to).
-- A waiter that joins or stays in the queue behind a holder marks the
-- holder's value (mark_held, from waiters.lua), and so does a waiter that
-- takes the key with others still in line behind it; grant.lua marks the
-- value it hands over.
-- Taking a key that already holds exactly ARGV[1] (or ARGV[1] and MARK: see
-- mark.lua) succeeds: a retry whose
-- reply was lost, or a waiter confirming the key handed to it, which
-- extends the key to its ttl and publishes "confirm:<token>"; its fence is
-- a new one (see fence.lua).
-- A fence counter that cannot be used is refused before anything is
-- written (fence_error), and so is a key held as another kind, with {2, 1,
-- kind} (see kinds.lua).
local key, value, queue = KEYS[1], ARGV[1], ARGV[4]
local counter = KEYS[2]
local token = string.sub(value, 1, 32)

local refused = counter and fence_error(counter, KEYS, 1)
if refused then
  return refused
end

local current = redis.pcall('GET', key)
if type(current) == 'table' then
  local kind = key_kind(key, clock_now())
  if kind then
    return {2, 1, kind_code(kind)}
  end
  -- A set of shares that all expired: free, and overwritten by SET.
  current = false
end
if current == value or current == value .. MARK then
  redis.call('PEXPIRE', key, ARGV[2])
  redis.pcall('PUBLISH', 'lockmacro:released:' .. key, 'confirm:' .. token)
  if counter then
    return {1, next_fence(counter, ARGV[5])}
  end
  return {1, 0}
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Expired entries are dropped from the front; one further back is skipped
-- when it gets there. Only the front is decoded: this waiter's own entry is
-- found by its token (hex, so never escaped, and `"v":"` cannot occur inside
-- an encoded string).
local entries = redis.call('LRANGE', queue, 0, -1)
local head, mine
local first = #entries + 1
for i, raw in ipairs(entries) do
  local entry = cjson.decode(raw)
  if entry.e > now then
    head, first = entry, i
    break
  end
  redis.call('LREM', queue, 1, raw)
end
local needle = '"v":"' .. token
local mine_at
for i = first, #entries do
  if string.find(entries[i], needle, 1, true) then
    mine, mine_at = entries[i], i
    break
  end
end

local function take()
  if mine then
    redis.call('LREM', queue, 1, mine)
  end
  -- Others still in line wait for this holder's release.
  if redis.call('LLEN', queue) > 0 then
    redis.call('SET', key, value .. MARK, 'PX', ARGV[2])
  else
    redis.call('SET', key, value, 'PX', ARGV[2])
  end
  if counter then
    return {1, next_fence(counter, ARGV[5])}
  end
  return {1, 0}
end

local granted
-- Live entries removed from the front below, all ahead of this waiter's.
local passed = 0
if not current then
  -- Free: it goes to the first live waiter in line. Another one is handed
  -- the key as a release would have (its grant lease ran out, or it was
  -- never woken), and this waiter waits at most that grant lease.
  local i = first
  while head and not granted do
    if string.sub(head.v, 1, 32) == token then
      return take()
    end
    redis.call('LREM', queue, 1, entries[i])
    passed = passed + 1
    granted = grant(key, head)
    head = nil
    while not granted and i < #entries do
      i = i + 1
      local entry = cjson.decode(entries[i])
      if entry.e > now then
        head = entry
        break
      end
      redis.call('LREM', queue, 1, entries[i])
      passed = passed + 1
    end
  end
  if not granted then
    return take()
  end
end

local wait = tonumber(ARGV[3])
if wait > 0 then
  local ttl = tonumber(ARGV[2])
  local attempt = tonumber(ARGV[8] or 0)
  if mine and attempt > 0 then
    -- Still in line: this attempt is now the last one a grant can follow.
    -- Entries ahead of it were removed above: the expired ones at the front
    -- (before `first`) and those passed over.
    local entry = cjson.decode(mine)
    entry.n = attempt
    redis.call('LSET', queue, mine_at - first - passed, cjson.encode(entry))
  elseif not mine then
    local entry = {v = value, t = ttl, e = now + wait, f = counter or '',
      g = tonumber(ARGV[6]), x = tonumber(ARGV[5])}
    if attempt > 0 then
      entry.n = attempt
    end
    redis.call('RPUSH', queue, cjson.encode(entry))
    -- The queue outlives its last entry's lease, then goes by itself.
    if redis.call('PTTL', queue) < wait + ttl then
      redis.call('PEXPIRE', queue, wait + ttl)
    end
  end
  mark_waiting(ARGV[7], wait + ttl)
  if current and ARGV[7] ~= '' then
    mark_held(key, current)
  end
end
if granted then
  return {0, 1, granted}
end
return {0, 1, redis.call('PTTL', key)}
