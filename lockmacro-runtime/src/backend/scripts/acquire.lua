-- Takes KEYS[1..n] for ARGV[2] ms with value ARGV[1], all or none.
-- KEYS[n+1], when present, is the fence counter: incremented and returned
-- (next_fence, from fence.lua), then kept for ARGV[4] ms after this use.
-- ARGV[3] = n. ARGV[5] = '1' when the caller listens for the release of a
-- busy key and will wait for it, then ARGV[5 + i] is the waiters flag of
-- KEYS[i] (see waiters.lua), which a busy answer sets.
-- Returns {1, fence or 0} when taken, {0, index, pttl} when KEYS[index] is held,
-- {2, index, kind} when KEYS[index] is held as another kind (see kinds.lua):
-- a semaphore or a read-write lock. A set of shares none of which is live
-- any more is free, and overwritten.
-- Taking keys that already hold exactly ARGV[1] (or ARGV[1] and MARK: a
-- waiter found it busy since, see mark.lua) succeeds: that is a retry of
-- an attempt whose reply was lost, told a fence of its own (see fence.lua).
-- All or none holds when the script fails too: everything that can fail
-- (a fence counter that is not one, a lock key of another type) is found
-- before the first write, and nothing after it can fail.
local n = tonumber(ARGV[3])
local value = ARGV[1]
local counter = KEYS[n + 1]

local refused = counter and fence_error(counter, KEYS, n)
if refused then
  return refused
end

-- The reply of keys taken: their fence (next_fence, also for keys already
-- ours: see fence.lua), when a counter was given, else 0.
local function taken()
  if counter then
    return {1, next_fence(counter, ARGV[4])}
  end
  return {1, 0}
end

-- The key held by `current`, another owner's value.
local function busy(i, current)
  local pttl = redis.call('PTTL', KEYS[i])
  if ARGV[5] == '1' and ARGV[5 + i] ~= '' then
    -- A key without expiry (another client's) is never released by this
    -- library's script: the flag only needs to last until the next attempt.
    mark_waiting(ARGV[5 + i], math.max(pttl, 0) + WAIT_MARGIN)
    mark_held(KEYS[i], current)
  end
  return {0, i, pttl}
end

-- Whether `current`, a key's value, is ARGV[1]'s, marked or not.
local function ours(current)
  return current == value or current == value .. MARK
end

-- KEYS[i] if it is not a string: nil when it is free (a set of shares
-- that all expired), else the reply refusing it.
local function other_kind(i)
  local kind = key_kind(KEYS[i], clock_now())
  if kind then
    return {2, i, kind_code(kind)}
  end
  return nil
end

if n == 1 then
  if not redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    local current = redis.pcall('GET', KEYS[1])
    if type(current) == 'table' then
      local refused = other_kind(1)
      if refused then
        return refused
      end
      redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
    elseif not ours(current) then
      return busy(1, current)
    else
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return taken()
    end
  end
else
  local retried = true
  for i = 1, n do
    local current = redis.pcall('GET', KEYS[i])
    if type(current) == 'table' then
      local refused = other_kind(i)
      if refused then
        return refused
      end
      retried = false
    elseif current then
      if not ours(current) then
        return busy(i, current)
      end
    else
      retried = false
    end
  end
  -- A retry writes its value again, without a mark: the release of
  -- several keys reads their flags (release.lua), marked or not.
  for i = 1, n do
    redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
  end
  if retried then
    return taken()
  end
end

return taken()
