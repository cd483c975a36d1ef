-- Prepended to every script that mints fencing tokens.
-- next_fence(counter) increments the counter and returns it. A missing
-- counter (never used, or lost with the server's data) first starts at the
-- server's clock in microseconds, so tokens keep increasing across data loss.
-- TIME gives seconds and microseconds as strings: joined, not added, so that
-- no double is involved. Scripts replicate their effects, so TIME is allowed
-- before a write. GET rather than EXISTS: one command fewer for a restricted
-- user to be granted.
local function next_fence(counter)
  if not redis.call('GET', counter) then
    local now = redis.call('TIME')
    redis.call('SET', counter, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  return redis.call('INCR', counter)
end

