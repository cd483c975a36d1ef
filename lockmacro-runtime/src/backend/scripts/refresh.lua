-- Extends KEYS[*] to ARGV[2] ms if every one is still held by token ARGV[1]
-- (a lock or a permit: see leases.lua). Returns 1 if it did, 0 (changing
-- nothing) otherwise.
local token, ttl = ARGV[1], tonumber(ARGV[2])
local kinds = {}
for i = 1, #KEYS do
  kinds[i] = held(KEYS[i], token)
  if not kinds[i] then
    return 0
  end
end
for i = 1, #KEYS do
  extend(KEYS[i], token, ttl, kinds[i])
end
return 1
