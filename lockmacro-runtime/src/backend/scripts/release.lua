-- Deletes each of KEYS[*] that still starts with token ARGV[1]; keys held by
-- someone else are left alone. Returns 1 if all were ours, else 0.
-- Each deleted key is announced on channel "lockmacro:released:<key>", so that
-- waiters retry at once instead of polling (a PUBLISH nobody listens to costs
-- one dictionary lookup). redis.pcall: a user whose ACL denies the channel
-- still releases; its waiters then wait by backoff.
local token = ARGV[1]
local all = 1
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value and string.sub(value, 1, #token) == token then
    redis.call('DEL', KEYS[i])
    redis.pcall('PUBLISH', 'lockmacro:released:' .. KEYS[i], '')
  else
    all = 0
  end
end
return all
