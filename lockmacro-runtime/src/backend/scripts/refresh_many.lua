-- Refreshes many leases at once. Lease i is ARGV[3i-2] (its token),
-- ARGV[3i-1] (its ttl in ms) and ARGV[3i] (how many keys it has), its keys
-- next in KEYS, in order. Each lease is extended, as refresh.lua would, only
-- if every one of its keys is still held by its token (see leases.lua).
-- Returns one 1 (extended) or 0 (changed nothing) per lease.
local refreshed = {}
local first = 1
for i = 1, #ARGV, 3 do
  local token, ttl = ARGV[i], tonumber(ARGV[i + 1])
  local last = first + tonumber(ARGV[i + 2]) - 1
  local done = 0
  if first == last then
    -- Most leases have one key: no table for them.
    local kind = held(KEYS[first], token)
    if kind then
      extend(KEYS[first], token, ttl, kind)
      done = 1
    end
  else
    local kinds = {}
    done = 1
    for k = first, last do
      kinds[k] = held(KEYS[k], token)
      if not kinds[k] then
        done = 0
        break
      end
    end
    if done == 1 then
      for k = first, last do
        extend(KEYS[k], token, ttl, kinds[k])
      end
    end
  end
  refreshed[#refreshed + 1] = done
  first = last + 1
end
return refreshed
