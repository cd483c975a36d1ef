-- Deletes every lease on KEYS[1], whoever holds it: the lock, or every
-- share of a semaphore or a read-write lock (a fair waiter's grant is such
-- a lease too). Each holder's next refresh then finds nothing (see
-- leases.lua) and its lease is lost. Waiters are served as a release
-- serves them (announce, from release_announce.lua): the first live entry
-- of the fair queue is handed the key, and the others are woken. ARGV[1]
-- is a token that no holder or waiter has (announce passes over the
-- entries of its own token), ARGV[2] the key's waiters flag, naming its
-- queue, as for release.lua. A key of another type (another client's
-- data) is left alone. Returns 1 when anything was held, else 0.
local key = KEYS[1]
local held = key_kind(key, server_now())
if not held or held == 'other' then
  return 0
end
redis.call('DEL', key)
local owned = 'permit'
if held == 'lock' then
  owned = 'lock'
else
  -- The shares' metadata goes with them (see holders.lua).
  local meta = holders_key(key)
  if meta then
    redis.pcall('DEL', meta)
  end
end
announce(ARGV[1], {{1, owned, ARGV[2]}})
return 1
