-- Prepended to the scripts that take, wait for or release a lock.
--
-- A release announces itself (hands the key to its first fair waiter, or
-- publishes on "lockmacro:released:<key>") only when someone may be waiting
-- for it, so that a release nobody waits for costs what a compare-and-delete
-- costs. Who waits is kept in a flag next to the lock, `{K}:waiters` (in K's
-- cluster slot, passed in by the client like the queue's name): an empty
-- string with an expiry.
--
-- mark_waiting(flag, ms) is called by every attempt that finds the key busy
-- and whose caller will wait for its release, in the same script call that
-- finds it busy, and makes the flag live at least `ms` more: for a waiter
-- that listens, the holder's remaining lease plus WAIT_MARGIN (its next
-- attempt is due when that lease ends, and sets the flag again if the key is
-- still held); for a fair waiter, as long as its queue entry (the queue can
-- then only hold entries younger than the flag).
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

local function awaited(flag)
  return flag == '' or redis.pcall('GET', flag) ~= false
end
