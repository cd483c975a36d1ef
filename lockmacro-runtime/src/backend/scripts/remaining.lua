-- The smallest remaining lease, in ms, of KEYS[*] if every one is still
-- held by token ARGV[1] (see leases.lua); -1 when none of them expires;
-- else -2.
local token = ARGV[1]
local least = -1
for i = 1, #KEYS do
  local kind = held(KEYS[i], token)
  if not kind then
    return -2
  end
  local left
  if kind ~= 'lock' then
    left = tonumber(redis.call('ZSCORE', KEYS[i], share_member(token, kind))) - server_now()
  else
    left = redis.call('PTTL', KEYS[i])
  end
  if least < 0 or (left >= 0 and left < least) then
    least = left
  end
end
return least
