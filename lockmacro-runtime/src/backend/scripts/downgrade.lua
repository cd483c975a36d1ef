-- Turns the write of KEYS[1] held by token ARGV[1] into a read (see
-- acquire_shared.lua: the member 'w:<token>' becomes '<token>'), with the
-- same expiry, in one step: no writer can take the key in between (the
-- holder's metadata, kept under its token beside the set, see holders.lua,
-- stays as it is, and so does the set's expiry). Then
-- announces it on "lockmacro:released:<key>", so that the readers waiting
-- behind the write try again at once. Returns 1 when the token held the
-- write, else 0, changing nothing.
local key, token = KEYS[1], ARGV[1]
local expires = redis.pcall('ZSCORE', key, 'w:' .. token)
if type(expires) ~= 'string' or tonumber(expires) <= clock_now() then
  return 0
end
redis.call('ZREM', key, 'w:' .. token)
redis.call('ZADD', key, expires, token)
redis.pcall('PUBLISH', 'lockmacro:released:' .. key, '')
return 1
