-- Deletes each of KEYS[*] still held by the token at the start of ARGV[1]
-- (the lease's value, or its token alone: see release_plain.lua), a lock,
-- or takes back a share (see leases.lua); keys held by someone else are
-- left alone.
-- ARGV[1 + i] names the waiters flag of KEYS[i] (see waiters.lua), in
-- KEYS[i]'s cluster slot, or is empty when the key can have none; left out
-- (one key, where the derived name is always in its slot: not on a
-- cluster), it is derived here as the client derives it (`derived_waiters_key`): an argument costs every
-- release, the derivation only this one, which is not the usual. The flag
-- and the queue of fair waiters (see acquire_fair.lua) are not declared, so
-- that a release touches one declared key per lock key, as before queues,
-- while a cluster slot migrates. Returns 1 if all were ours, else 0.
-- When the flag says nobody waits, that is all: GET and DEL, and one GET of
-- the flag (see waiters.lua for why no waiter is missed). Else
-- (release_announce.lua) a deleted key whose queue has a live waiter is
-- handed to it at once, for its short grant lease, which the waiter
-- confirms (grant, from grant.lua), and any other deleted key is announced
-- on "lockmacro:released:<key>" with an empty message, so that waiters
-- retry at once instead of polling. The caller's own queue entry, if any, is
-- removed: a waiter that gives up leaves the queue this way.
-- redis.pcall: a user whose ACL denies the channel still releases; its
-- waiters then wait by backoff. A flag of another type (written by someone
-- else) counts as set; an empty flag name, as set.
local function derived_flag(key)
  local open = string.find(key, '{', 1, true)
  local close = open and string.find(key, '}', open + 1, true)
  if close and close > open + 1 then
    return key .. ':waiters'
  end
  return '{' .. key .. '}:waiters'
end

-- Tokens are 32 hex digits.
local token = string.sub(ARGV[1], 1, 32)
local all = 1
local awaited
for i = 1, #KEYS do
  local key = KEYS[i]
  local flag = ARGV[1 + i] or derived_flag(key)
  -- A lock or a share (see leases.lua).
  local owned = held(key, token)
  if owned == 'lock' then
    redis.call('DEL', key)
  elseif owned then
    redis.call('ZREM', key, share_member(token, owned))
    -- The last share takes the set, and its kind (see kinds.lua), with it,
    -- unless a writer waits: its mark (see acquire_shared.lua), live since
    -- set_shares drops it once past, holds new readers back until the
    -- writer's next attempt, and the set lasts as long. The holder's
    -- metadata goes with its share, all of it with the last share (see
    -- holders.lua).
    local now = server_now()
    local meta = holders_key(key)
    if set_shares(key, now) == 0 then
      if meta then
        redis.pcall('DEL', meta)
      end
      local writing = redis.call('ZSCORE', key, 'writing')
      if writing then
        local left = math.ceil(tonumber(writing) - now)
        if redis.call('PTTL', key) < left then
          redis.call('PEXPIRE', key, left)
        end
      else
        redis.call('DEL', key)
      end
    elseif meta then
      redis.pcall('HDEL', meta, token)
    end
  else
    all = 0
  end
  if flag == '' or redis.pcall('GET', flag) ~= false then
    awaited = awaited or {}
    awaited[#awaited + 1] = {i, owned, flag}
  end
end
if awaited then
  announce(token, awaited)
end
return all
