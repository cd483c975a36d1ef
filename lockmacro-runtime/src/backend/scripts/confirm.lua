-- Confirms KEYS[1], handed to a fair waiter for a grant lease (see
-- grant.lua), after the waiter already returned it to its caller: extends it
-- to ARGV[2] ms if it still starts with token ARGV[1], and publishes
-- "confirm:<token>" so that the other waiters stop watching that hand-off.
-- Returns 1 if it did, 0 (changing nothing) otherwise. Unlike an acquire it
-- never takes a free key: it may run after the waiter's own release.
local token = ARGV[1]
local value = redis.call('GET', KEYS[1])
if not value or string.sub(value, 1, #token) ~= token then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.pcall('PUBLISH', 'lockmacro:released:' .. KEYS[1], 'confirm:' .. token)
return 1
