-- Prepended to the scripts that refresh, release or measure leases. A lease
-- on a key is either a lock, the key itself as a string whose value starts
-- with the owner's token, or a share of one (see acquire_shared.lua): a
-- permit of a semaphore or a read, the owner's token as a member of the
-- sorted set at the key, or the write, 'w:' and the token, each scored with
-- its expiry in server milliseconds. Both are
-- found from the key and the token alone, so the watchdog, refresh and
-- release need not know which a lease is.
--
-- held(key, token) is 'lock', 'permit' (a permit or a read: see
-- acquire_shared.lua) or 'write' when the owner of `token` holds that lease
-- on `key`, else nil. extend(key, token, ttl, kind) makes it last
-- `ttl` ms from now. A permit keeps its set alive at least as long as
-- itself, so that a set whose holders all died goes with their last permit,
-- and gives the hash of the shares' metadata the set's expiry (see
-- holders.lua, which comes before this).
local clock_ms

-- The member of a share: the token for a permit or a read, 'w:' and the
-- token for the write.
local function share_member(token, kind)
  if kind == 'write' then
    return 'w:' .. token
  end
  return token
end

local function server_now()
  if not clock_ms then
    local time = redis.call('TIME')
    clock_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return clock_ms
end

local function held(key, token)
  local value = redis.pcall('GET', key)
  if type(value) == 'string' then
    if string.sub(value, 1, #token) == token then
      return 'lock'
    end
    return nil
  end
  -- GET fails on any other type; only a sorted set holds shares.
  if type(value) == 'table' then
    for _, kind in ipairs({'permit', 'write'}) do
      local expires = redis.pcall('ZSCORE', key, share_member(token, kind))
      if type(expires) == 'string' and tonumber(expires) > server_now() then
        return kind
      end
    end
  end
  return nil
end

local function extend(key, token, ttl, kind)
  if kind == 'lock' then
    redis.call('PEXPIRE', key, ttl)
    return
  end
  redis.call('ZADD', key, 'XX', server_now() + ttl, share_member(token, kind))
  local left = redis.call('PTTL', key)
  if left < ttl then
    redis.call('PEXPIRE', key, ttl)
    left = ttl
  end
  -- The shares' metadata (see holders.lua) lasts as long as the set.
  local meta = holders_key(key)
  if meta then
    redis.pcall('PEXPIRE', meta, left)
  end
end
