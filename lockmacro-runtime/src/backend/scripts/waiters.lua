-- Prepended, after mark.lua, to the scripts that take or wait for a lock.
--
-- A release announces itself (hands the key to its first fair waiter, or
-- publishes on "lockmacro:released:<key>") only when someone may be waiting
-- for it, so that a release nobody waits for costs what a compare-and-delete
-- costs. Who waits is kept in two places: a flag next to the lock,
-- `{K}:waiters` (in K's cluster slot, passed in by the client like the
-- queue's name), an empty string with an expiry; and, for a lock (a string
-- value), MARK at the end of the holder's value (see mark.lua).
--
-- mark_waiting(flag, ms) is called by every attempt that finds the key busy
-- and whose caller will wait for its release, in the same script call that
-- finds it busy, and makes the flag live at least `ms` more: for a waiter
-- that listens, the holder's remaining lease plus WAIT_MARGIN (its next
-- attempt is due when that lease ends, and sets the flag again if the key is
-- still held); for a fair waiter, as long as its queue entry (the queue can
-- then only hold entries younger than the flag).
--
-- mark_held(key, value) is called with it when a lock holds the key
-- (`value`, as just read): it appends MARK to the value unless it ends with
-- it already, by SET with KEEPTTL, which keeps the key's expiry (SET rather
-- than APPEND: no command beyond those the user was granted before). So
-- is every write of a value that waiters are known to wait behind: a fair
-- hand-off (grant.lua), a fair waiter taking the key with others still in
-- line (acquire_fair.lua).
--
-- A release of one lock reads the flag only when the value ends with MARK
-- (release_plain.lua): a value without it was never found busy by a waiter
-- since it was written, so nobody waits for it, and the release is a
-- compare-and-delete. A marked value, several keys or shares: the release
-- reads the flag, which stays the authority there, as below.
--
-- awaited(flag) is read by a release, after it deleted the key. No waiter
-- is missed: a waiter listens on the channel before the attempt that finds
-- the key busy, and that attempt sets the flag; script calls run one at a
-- time, so a release either runs before that attempt (which then finds the
-- key free) or after it, and then sees the flag until the waiter's next
-- attempt is due. A release that comes once the flag has expired comes when
-- that waiter is about to try again anyway (its timer is the holder's lease,
-- which the flag outlives by WAIT_MARGIN); a waiter that stopped waiting
-- merely leaves the flag to expire, and costs the next releases a PUBLISH
-- until it does.
--
-- An empty flag name: the key can have no flag (on a cluster, one would be
-- in another slot), so its releases always announce themselves.
-- GET and PTTL rather than EXISTS: no command beyond those the other scripts
-- use for a restricted user to be granted. A flag of another type (written
-- by someone else) counts as set.
local WAIT_MARGIN = 1000

local function mark_waiting(flag, ms)
  if flag ~= '' and redis.call('PTTL', flag) < ms then
    redis.call('SET', flag, '', 'PX', ms)
  end
end

local function mark_held(key, value)
  if string.sub(value, -1) ~= MARK then
    redis.call('SET', key, value .. MARK, 'KEEPTTL')
  end
end

local function awaited(flag)
  return flag == '' or redis.pcall('GET', flag) ~= false
end
