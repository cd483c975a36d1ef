-- Redlock: raises the fence counter KEYS[n+1] to at least ARGV[2], if every
-- one of KEYS[1..n] still holds exactly ARGV[1] (n = #KEYS - 1).
-- The fencing token is the largest counter among the masters that granted the
-- lock; writing it back to each of them, while the lock is still held there,
-- keeps tokens increasing for the next holder, whose majority shares at least
-- one of these masters.
-- A master that lost its counter (restarted without persistence) had it seeded
-- from its clock by the acquire script just before; raising it never lowers it.
-- tonumber is exact: counters seeded from a clock in microseconds stay below
-- 2^53 until the year 2255.
-- The counter keeps expiring ARGV[3] ms after its last use (see fence.lua).
-- Returns 1 when the lock was still held (and the counter is now >= ARGV[2]),
-- 0 otherwise, changing nothing.
local n = #KEYS - 1
for i = 1, n do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
if tonumber(redis.call('GET', KEYS[n + 1]) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[n + 1], ARGV[2], 'PX', ARGV[3])
end
return 1
