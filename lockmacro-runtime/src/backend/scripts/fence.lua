-- Prepended to every script that mints fencing tokens.
--
-- fence_error(counter, keys, n) is checked before the script writes
-- anything: Redis does not undo the writes of a script that fails, so an
-- INCR refused after a SET would leave the lock key behind with nobody
-- owning it. It returns an error reply when the counter is one of
-- keys[1..n] (the keys being locked), or when it holds anything but a
-- counter: text (another lock's value), a list (a fair queue), a number
-- that INCR would refuse or overflow. Else nil. The reply starts with the
-- code NOTAFENCE, which the client turns into `LockError::InvalidKey`.
--
-- next_fence(counter, expiry) increments the counter and returns it, and
-- lets it expire `expiry` ms after this, its last use, so that counters of
-- keys no longer locked do not pile up. A missing counter (never used,
-- expired, or lost with the server's data) first starts at the server's
-- clock in microseconds. Tokens never go backwards across an expiry: the
-- last token of the old counter is at most its seed (the clock when it was
-- created) plus one per acquisition, and each acquisition is a script call,
-- which takes more than a microsecond, so the last token is below the clock
-- of its last use; the new seed is read at least `expiry` later, on the
-- clock Redis also expires keys by. The same holds after data loss, as long
-- as the clock does not step back across the restart.
--
-- An attempt that finds the key already its own (a retry whose first reply
-- was lost, or a waiter taking a key handed to it) mints a fence too
-- (next_fence), rather than reading the counter as it stands: several
-- locks may share one counter, whose value is then another holder's, and
-- a counter that expired or was lost since would read as nothing. The
-- fence its first attempt minted was never used (its reply was lost) or is
-- below the new one, so the holder's fences only go up.
-- TIME gives seconds and microseconds as strings: joined, not added, so that
-- no double is involved. Scripts replicate their effects, so TIME is allowed
-- before a write. GET rather than EXISTS or TYPE: one command fewer for a
-- restricted user to be granted.
local function fence_error(counter, keys, n)
  for i = 1, n do
    if keys[i] == counter then
      return redis.error_reply('NOTAFENCE the fence counter is also a key being locked')
    end
  end
  local current = redis.pcall('GET', counter)
  if type(current) == 'table' then
    return redis.error_reply('NOTAFENCE the fence counter holds a value that is not a string')
  end
  if not current or current == '0' then
    return nil
  end
  -- A decimal integer as INCR reads it (no sign, no leading zero), below
  -- 2^63 - 1 so that the increment cannot overflow.
  if string.match(current, '^[1-9]%d*$')
      and (#current < 19 or (#current == 19 and current < '9223372036854775807')) then
    return nil
  end
  return redis.error_reply('NOTAFENCE the fence counter holds a value that is not a counter (a lock key?)')
end

local function next_fence(counter, expiry)
  if not redis.call('GET', counter) then
    local now = redis.call('TIME')
    redis.call('SET', counter, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local fence = redis.call('INCR', counter)
  redis.call('PEXPIRE', counter, expiry)
  return fence
end
