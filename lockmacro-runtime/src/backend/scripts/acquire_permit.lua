-- Takes one of ARGV[3] permits of the semaphore KEYS[1] for ARGV[2] ms, for
-- the owner of the token that starts ARGV[1]. KEYS[2], when present, is the
-- fence counter: incremented (next_fence, from fence.lua), returned, and
-- kept for ARGV[4] ms after this use. ARGV[5] = '1' when the caller listens
-- for releases and will wait, then ARGV[6] is the key's waiters flag (see
-- waiters.lua), which a busy answer sets.
-- The semaphore is a sorted set: one member per permit held, the owner's
-- token, scored with when the permit expires (server time, ms). Permits
-- past their expiry are dropped before counting, so a holder that died
-- gives its permit back after its ttl, never sooner. The set itself expires
-- with its longest permit.
-- Returns {1, fence or 0} when taken, {0, 1, ms} when all permits are held,
-- ms being how long until the first of them expires. Taking a permit this
-- token already holds succeeds (a retry whose reply was lost) and extends
-- it. A key that holds anything but permits (a lock of the same name) is
-- refused before anything is written, with NOTPERMITS.
local key, counter = KEYS[1], KEYS[2]
local token = string.sub(ARGV[1], 1, 32)
local ttl, permits = tonumber(ARGV[2]), tonumber(ARGV[3])

if counter then
  local refused = fence_error(counter, KEYS, 1)
  if refused then
    return refused
  end
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local dropped = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now)
if type(dropped) == 'table' and dropped.err then
  return redis.error_reply('NOTPERMITS the key holds something other than permits ' ..
    '(a lock taken without permits, or another client\'s data)')
end

local function keep()
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

if redis.call('ZSCORE', key, token) then
  redis.call('ZADD', key, 'XX', now + ttl, token)
  keep()
  if counter then
    return {1, tonumber(redis.call('GET', counter) or 0)}
  end
  return {1, 0}
end

if redis.call('ZCARD', key) >= permits then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local left = math.max(tonumber(first[2]) - now, 0)
  if ARGV[5] == '1' then
    mark_waiting(ARGV[6], left + WAIT_MARGIN)
  end
  return {0, 1, left}
end

redis.call('ZADD', key, now + ttl, token)
keep()
if counter then
  return {1, next_fence(counter, ARGV[4])}
end
return {1, 0}
