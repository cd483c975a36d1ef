-- The smallest PTTL of KEYS[*] if every one still starts with token ARGV[1],
-- else -2.
local token = ARGV[1]
local least = -1
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if not value or string.sub(value, 1, #token) ~= token then
    return -2
  end
  local pttl = redis.call('PTTL', KEYS[i])
  if least < 0 or (pttl >= 0 and pttl < least) then
    least = pttl
  end
end
return least
