-- Refreshes many leases at once. Lease i is ARGV[3i-2] (its token),
-- ARGV[3i-1] (its ttl in ms) and ARGV[3i] (how many keys it has), its keys
-- next in KEYS, in order. Each lease is extended, as refresh.lua would, only
-- if every one of its keys still starts with its token.
-- Returns one 1 (extended) or 0 (changed nothing) per lease.
local refreshed = {}
local first = 1
for i = 1, #ARGV, 3 do
  local token = ARGV[i]
  local last = first + tonumber(ARGV[i + 2]) - 1
  local held = 1
  for k = first, last do
    local value = redis.call('GET', KEYS[k])
    if not value or string.sub(value, 1, #token) ~= token then
      held = 0
      break
    end
  end
  if held == 1 then
    for k = first, last do
      redis.call('PEXPIRE', KEYS[k], ARGV[i + 1])
    end
  end
  refreshed[#refreshed + 1] = held
  first = last + 1
end
return refreshed
