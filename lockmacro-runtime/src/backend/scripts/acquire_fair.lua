-- A fair attempt to take KEYS[1] for ARGV[2] ms with value ARGV[1] (the
-- 32-character token, then metadata). KEYS[2], when present, is the fence
-- counter: incremented (next_fence, from fence.lua)
-- and returned. ARGV[3] = how long this waiter stays queued,
-- in ms (0: do not queue). ARGV[4] names the key's queue of waiters, in
-- KEYS[1]'s cluster slot (undeclared, as in release.lua).
-- The queue is a list, oldest first, of cjson entries {v = value, t = ttl ms,
-- e = expiry (server time, ms), f = fence key or ''}; release.lua hands the
-- key to its first live entry. Entries past their expiry are dropped.
-- Returns {1, fence or 0} when taken, {0, 1, ms} when not, ms being how long
-- to wait at most before trying again (the holder's lease, or the first
-- waiter's expiry when the key is free but someone else is first).
-- Taking a key that already holds exactly ARGV[1] succeeds: a retry whose
-- reply was lost, or a waiter the key was handed to.
local key, value, queue = KEYS[1], ARGV[1], ARGV[4]
local token = string.sub(value, 1, 32)

local current = redis.call('GET', key)
if current == value then
  redis.call('PEXPIRE', key, ARGV[2])
  if #KEYS > 1 then
    return {1, tonumber(redis.call('GET', KEYS[2]) or 0)}
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
for i = first, #entries do
  if string.find(entries[i], needle, 1, true) then
    mine = entries[i]
    break
  end
end

if not current and (not head or string.sub(head.v, 1, 32) == token) then
  if mine then
    redis.call('LREM', queue, 1, mine)
  end
  redis.call('SET', key, value, 'PX', ARGV[2])
  if #KEYS > 1 then
    return {1, next_fence(KEYS[2])}
  end
  return {1, 0}
end

local wait = tonumber(ARGV[3])
if wait > 0 and not mine then
  local ttl = tonumber(ARGV[2])
  redis.call('RPUSH', queue, cjson.encode({v = value, t = ttl, e = now + wait, f = KEYS[2] or ''}))
  -- The queue outlives its last entry's lease, then goes by itself.
  if redis.call('PTTL', queue) < wait + ttl then
    redis.call('PEXPIRE', queue, wait + ttl)
  end
end
if current then
  return {0, 1, redis.call('PTTL', key)}
end
return {0, 1, head.e - now}
