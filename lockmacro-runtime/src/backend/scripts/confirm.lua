-- Confirms KEYS[1], handed to a fair waiter for a grant lease (see
-- grant.lua), after the waiter already returned it to its caller: extends
-- the waiter's lease (the key, or its permit: see leases.lua) to ARGV[2] ms
-- if token ARGV[1] still holds it, and publishes "confirm:<token>" so that
-- the other waiters stop watching that hand-off. Returns 1 if it did, 0
-- (changing nothing) otherwise. Unlike an acquire it never takes a free
-- key: it may run after the waiter's own release.
local token = ARGV[1]
local kind = held(KEYS[1], token)
if not kind then
  return 0
end
extend(KEYS[1], token, tonumber(ARGV[2]), kind)
redis.pcall('PUBLISH', 'lockmacro:released:' .. KEYS[1], 'confirm:' .. token)
return 1
