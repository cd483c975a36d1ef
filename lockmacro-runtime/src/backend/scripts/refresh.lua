-- Extends KEYS[*] to ARGV[2] ms if every one still starts with token ARGV[1].
-- Returns 1 if it did, 0 (changing nothing) otherwise.
local token = ARGV[1]
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if not value or string.sub(value, 1, #token) ~= token then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
