-- Prepended, after fence.lua, to the scripts that hand a key to a fair
-- waiter (release.lua, and acquire_fair.lua when it finds the key free with
-- another waiter first in line).
--
-- grant(key, entry) gives `key` (or, for an entry with p, one of the key's
-- p permits: see acquire_shared.lua) to the decoded queue entry `entry`
-- (see acquire_fair.lua) for its grant lease only (entry.g ms, at most its ttl),
-- mints its fencing token (next_fence), and publishes "grant:<token>:<lease
-- ms>:<fence>:<attempt>" on "lockmacro:released:<key>" (the fence is 0 when
-- none was minted; the attempt is the entry's n, see acquire_fair.lua). The
-- key is the waiter's from before that message: it holds it until at least
-- its attempt's send time plus the lease, so it goes on at once when that
-- leaves it time, and confirms meanwhile (confirm.lua: extends the key to
-- its ttl and publishes "confirm:<token>"). One woken too late to trust that
-- bound confirms first, by trying again: acquire_fair.lua finds the key
-- holding its value, extends it and publishes the same. An entry without n
-- is told "grant:<token>:<lease ms>" and confirms first. A waiter
-- that died in the queue never confirms, so it holds the key for its grant
-- lease at most, and never for its ttl.
-- The other waiters of the key hear both messages on the channel they
-- already listen to: one that hears a grant and no confirm within its lease
-- tries again, which gives the key to the next in line (or takes it). The
-- key is held, by the grantee, until the lease ends, so no one can be let in
-- early; every waiter has a timer on that end, so no one sleeps past it.
--
-- An entry without g, queued by a version of the library without grant
-- leases, is given the key for its whole ttl and told "<token>:<fence>", as
-- that version expects.
-- Returns the lease given, in ms, or false, changing nothing, when the
-- entry's fence counter cannot be used (fence_error): the caller drops the
-- entry and goes on with the next.
local DEFAULT_FENCE_EXPIRY = 86400000

local function grant(key, entry)
  if entry.f ~= '' and fence_error(entry.f, {key}, 1) then
    return false
  end
  local lease = entry.t
  if entry.g and entry.g < lease then
    lease = entry.g
  end
  if entry.p then
    -- A waiter for one of entry.p permits (see acquire_shared.lua): its
    -- permit, scored with the lease's end on the server's clock.
    -- Its metadata, what follows the token in entry.v, beside the set (see
    -- holders.lua).
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    redis.call('ZADD', key, now + lease, string.sub(entry.v, 1, 32))
    redis.call('ZADD', key, '+inf', kind_marker(entry.p))
    local left = redis.call('PTTL', key)
    if left < lease then
      redis.call('PEXPIRE', key, lease)
      left = lease
    end
    local meta = #entry.v > 32 and holders_key(key)
    if meta then
      redis.pcall('HSET', meta, string.sub(entry.v, 1, 32), string.sub(entry.v, 33))
      redis.pcall('PEXPIRE', meta, left)
    end
  else
    -- Marked (see mark.lua) whether or not others wait behind it: its
    -- release then reads the flag, and finds out, once.
    redis.call('SET', key, entry.v .. MARK, 'PX', lease)
  end
  local fence = 0
  if entry.f ~= '' then
    fence = next_fence(entry.f, entry.x or DEFAULT_FENCE_EXPIRY)
  end
  local token = string.sub(entry.v, 1, 32)
  local channel = 'lockmacro:released:' .. key
  if entry.g and entry.n then
    -- %d: a fence seeded from the clock in microseconds has 16 digits,
    -- which `..` would print in exponent notation.
    redis.pcall('PUBLISH', channel, string.format('grant:%s:%d:%d:%d', token, lease, fence,
      entry.n))
  elseif entry.g then
    redis.pcall('PUBLISH', channel, 'grant:' .. token .. ':' .. lease)
  else
    redis.pcall('PUBLISH', channel, token .. ':' .. fence)
  end
  return lease
end

