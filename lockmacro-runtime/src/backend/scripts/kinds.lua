-- Prepended to the scripts that take, release, inspect or clear a key,
-- after holders.lua.
--
-- A key is one kind while it is held: a lock (a string: the owner's token,
-- then metadata), or a sorted set of shares (see acquire_shared.lua) that
-- is either a semaphore of N permits or a read-write lock. The set says
-- which with one marker member, 'kind:<N>' for a semaphore of N permits or
-- 'kind:rw' for a read-write lock, scored +inf: the sweep of expired shares
-- (ZREMRANGEBYSCORE up to now) never drops it, and it never counts as a
-- share. It is kept from outliving the shares: a set whose live shares are
-- all gone is free for any kind (its marker is written over), the release
-- of the last share deletes the set, and the set expires with its longest
-- share (the marker has no expiry of its own).
--
-- Every acquire reads the kind before it writes anything and refuses
-- another kind, or another permit count, with the reply {2, index, code}:
-- KEYS[index] is held as `code` (kind_code below), which the client turns
-- into `LockError::WrongKind`.

-- The marker member of a set of shares of `kind` ('rw' or a permit count).
local function kind_marker(kind)
  return 'kind:' .. kind
end

-- The live shares of the set at `key` once the expired ones are dropped
-- (`now`: server ms), and its marked kind ('rw', a permit count as a
-- string, or nil for a set written before kinds were kept). The writer's
-- waiting mark (see acquire_shared.lua) is not a share. The metadata of
-- the shares dropped goes with them (see holders.lua): the whole hash
-- when no share is left, else the fields whose token is no longer a
-- member; a sweep that drops nothing does not look at it.
local function set_shares(key, now)
  local dropped = redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local shares = redis.call('ZCOUNT', key, '-inf', '(+inf')
  if redis.call('ZSCORE', key, 'writing') then
    shares = shares - 1
  end
  local meta = dropped > 0 and holders_key(key)
  if meta and shares == 0 then
    redis.pcall('DEL', meta)
  elseif meta then
    local tokens = redis.pcall('HKEYS', meta)
    if type(tokens) == 'table' and not tokens.err then
      for _, token in ipairs(tokens) do
        if not redis.call('ZSCORE', key, token) and not redis.call('ZSCORE', key, 'w:' .. token) then
          redis.pcall('HDEL', meta, token)
        end
      end
    end
  end
  local marked
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, '+inf', '+inf')) do
    if string.sub(member, 1, 5) == 'kind:' then
      marked = string.sub(member, 6)
    end
  end
  return shares, marked
end

-- What `key` is held as: 'lock', 'rw', a permit count (a string), 'shares'
-- (a set of shares without a marker), 'other' (another type: another
-- client's data), or false when nothing holds it. GET rather than TYPE:
-- one command fewer for a restricted user to be granted.
local function key_kind(key, now)
  local value = redis.pcall('GET', key)
  if type(value) == 'string' then
    return 'lock'
  end
  if not value then
    return false
  end
  local counted = redis.pcall('ZCOUNT', key, '-inf', '+inf')
  if type(counted) == 'table' then
    return 'other'
  end
  local shares, marked = set_shares(key, now)
  if shares == 0 then
    return false
  end
  return marked or 'shares'
end

-- A kind as the client reads it: -1 a lock, 0 a read-write lock, N > 0 a
-- semaphore of N permits, -2 anything else.
local function kind_code(kind)
  if kind == 'lock' then
    return -1
  elseif kind == 'rw' then
    return 0
  end
  return tonumber(kind) or -2
end

-- The server's clock in ms.
local function clock_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
