-- Deletes each of KEYS[*] that still starts with token ARGV[1]; keys held by
-- someone else are left alone. Returns 1 if all were ours, else 0.
local token = ARGV[1]
local all = 1
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value and string.sub(value, 1, #token) == token then
    redis.call('DEL', KEYS[i])
  else
    all = 0
  end
end
return all
