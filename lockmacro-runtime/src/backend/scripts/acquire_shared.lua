-- Takes a share of KEYS[1] for ARGV[2] ms, for the owner of the token that
-- starts ARGV[1] (the lease's value: the token, then the holder's
-- metadata): one of ARGV[3] permits (a semaphore) when ARGV[3] is a
-- number, else a read ('read') or the write ('write') of a read-write lock.
-- KEYS[2], when present, is the fence counter: incremented (next_fence, from
-- fence.lua), returned, and kept for ARGV[4] ms after this use. ARGV[5] =
-- '1' when the caller listens for releases and will wait, then ARGV[6] is
-- the key's waiters flag (see waiters.lua), which a busy answer sets.
-- For permits, ARGV[7], when not empty, names the key's queue of fair
-- waiters (see acquire_fair.lua), which this attempt respects and joins for
-- ARGV[8] ms (0: respects without joining); ARGV[9] is its grant lease and
-- ARGV[10] its attempt number, as there.
--
-- The key is a sorted set: one member per share held, scored with when it
-- expires (server time, ms). A permit or a read is the holder's token; the
-- write is 'w:' followed by the writer's token, and is only ever alone in
-- the set. A writer that finds readers and will wait for them leaves the
-- member 'writing', scored with when its next attempt is due (plus a
-- margin), and readers that come after it wait behind it: a stream of
-- readers cannot starve a writer. Shares past their
-- expiry are dropped before counting, so a holder that died gives its share
-- back after its ttl, never sooner. The set expires with its longest share.
-- The holders' metadata is kept beside the set (see holders.lua).
--
-- Returns {1, fence or 0} when taken, {0, 1, ms} when not, ms being how
-- long until the first share in the way expires. Taking a share this token
-- already holds succeeds (a retry whose reply was lost) and extends it,
-- with a fence of its own (see fence.lua). A
-- key held as another kind (a lock, a semaphore of another count, a
-- read-write lock; see kinds.lua) is refused before anything is written,
-- with {2, 1, kind}; one that holds another client's data, with NOTSHARES.
local key, counter = KEYS[1], KEYS[2]
local token = string.sub(ARGV[1], 1, 32)
local ttl, kind = tonumber(ARGV[2]), ARGV[3]
local member = token
if kind == 'write' then
  member = 'w:' .. token
end
-- The kind asked for, as the set's marker names it.
local asked = kind
if kind == 'read' or kind == 'write' then
  asked = 'rw'
end

local refused = counter and fence_error(counter, KEYS, 1)
if refused then
  return refused
end

local now = clock_now()
local held = key_kind(key, now)
if held == 'other' then
  return redis.error_reply('NOTSHARES the key holds something other than permits or ' ..
    'read-write shares (another client\'s data)')
end
if held and held ~= asked and held ~= 'shares' then
  return {2, 1, kind_code(held)}
end
if not held then
  -- Shares all gone: the marker of what the key was goes too.
  redis.call('ZREMRANGEBYSCORE', key, '+inf', '+inf')
end

-- The set's remaining ms, made at least the ttl.
local function keep()
  local left = redis.call('PTTL', key)
  if left < ttl then
    redis.call('PEXPIRE', key, ttl)
    left = ttl
  end
  return left
end

-- The share taken: the holder's metadata (what follows the token in
-- ARGV[1]), when there is any, is written beside the set, which it lasts
-- as long as (see holders.lua).
local function taken(fence)
  local left = keep()
  local metadata = string.sub(ARGV[1], 33)
  local meta = metadata ~= '' and holders_key(key)
  if meta then
    redis.pcall('HSET', meta, token, metadata)
    redis.pcall('PEXPIRE', meta, left)
  end
  return {1, fence}
end

local queue = ARGV[7] or ''

if redis.call('ZSCORE', key, member) then
  redis.call('ZADD', key, 'XX', now + ttl, member)
  if queue ~= '' then
    -- A fair waiter confirming the permit handed to it (grant.lua).
    redis.pcall('PUBLISH', 'lockmacro:released:' .. key, 'confirm:' .. token)
  end
  if counter then
    return taken(next_fence(counter, ARGV[4]))
  end
  return taken(0)
end

local function busy(until_ms)
  local left = math.max(until_ms - now, 0)
  if ARGV[5] == '1' then
    mark_waiting(ARGV[6], left + WAIT_MARGIN)
  end
  return {0, 1, left}
end

-- The first share's expiry and the number of shares, the writer's waiting
-- mark left out.
local writing = tonumber(redis.call('ZSCORE', key, 'writing') or 0)
local shares = 0
if held then
  shares = set_shares(key, now)
end
local function first()
  local entries = redis.call('ZRANGE', key, 0, 1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    if entries[i] ~= 'writing' and string.sub(entries[i], 1, 5) ~= 'kind:' then
      return tonumber(entries[i + 1])
    end
  end
  return now
end

if kind == 'write' then
  if shares > 0 then
    -- Readers (or another writer) hold it. A writer that will wait holds
    -- new readers back until its next attempt is due; one that gives up
    -- leaves them held back until then, no longer.
    local until_ms = first()
    local mark = until_ms + WAIT_MARGIN
    if ARGV[5] == '1' and mark > writing then
      redis.call('ZADD', key, mark, 'writing')
      keep()
    end
    return busy(until_ms)
  end
  redis.call('ZREM', key, 'writing')
elseif kind == 'read' then
  if shares == 1 then
    local only = redis.call('ZRANGE', key, 0, -1)
    for _, held in ipairs(only) do
      if string.sub(held, 1, 2) == 'w:' then
        return busy(tonumber(redis.call('ZSCORE', key, held)))
      end
    end
  end
  if writing > 0 then
    return busy(writing)
  end
elseif queue ~= '' then
  -- Fair permits: those in line before this waiter are served first, each
  -- handed a permit as a release would (grant, from grant.lua); this waiter
  -- takes one only if one is left for it, else it waits in line.
  local permits = tonumber(kind)
  local entries = redis.call('LRANGE', queue, 0, -1)
  local needle = '"v":"' .. token
  local mine, mine_at
  local passed = 0
  for i, raw in ipairs(entries) do
    if string.find(raw, needle, 1, true) then
      mine, mine_at = raw, i
      break
    end
    local entry = cjson.decode(raw)
    if entry.e > now and shares < permits then
      redis.call('LREM', queue, 1, raw)
      passed = passed + 1
      if grant(key, entry) then
        shares = shares + 1
      end
    elseif entry.e <= now then
      redis.call('LREM', queue, 1, raw)
      passed = passed + 1
    end
  end
  if shares < permits and (mine_at == nil or mine_at == passed + 1) then
    if mine then
      redis.call('LREM', queue, 1, mine)
    end
  else
    local wait = tonumber(ARGV[8])
    if wait > 0 then
      local attempt = tonumber(ARGV[10] or 0)
      if mine then
        if attempt > 0 then
          local entry = cjson.decode(mine)
          entry.n = attempt
          redis.call('LSET', queue, mine_at - 1 - passed, cjson.encode(entry))
        end
      else
        local entry = {v = ARGV[1], t = ttl, e = now + wait, f = counter or '',
          g = tonumber(ARGV[9]), x = tonumber(ARGV[4]), p = permits}
        if attempt > 0 then
          entry.n = attempt
        end
        redis.call('RPUSH', queue, cjson.encode(entry))
      end
      if redis.call('PTTL', queue) < wait + ttl then
        redis.call('PEXPIRE', queue, wait + ttl)
      end
      mark_waiting(ARGV[6], wait + ttl)
    end
    return busy(first())
  end
else
  if shares >= tonumber(kind) then
    return busy(first())
  end
end

redis.call('ZADD', key, now + ttl, member)
redis.call('ZADD', key, '+inf', kind_marker(asked))
if counter then
  return taken(next_fence(counter, ARGV[4]))
end
return taken(0)
