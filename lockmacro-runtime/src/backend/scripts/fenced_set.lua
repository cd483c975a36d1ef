-- Fenced write: sets the hash KEYS[1] to {fence = ARGV[1], value = ARGV[2]}
-- unless it already holds a newer fence, i.e. only if token ARGV[1] is not
-- older than the newest token applied to this resource.
-- Tokens are decimal u64 without leading zeros; they are compared as strings
-- (length, then digits), because Lua numbers are doubles and lose precision
-- above 2^53.
-- Returns 1 when written, 0 (changing nothing) when the token is stale.
local newest = redis.call('HGET', KEYS[1], 'fence')
local token = ARGV[1]
if newest and (#token < #newest or (#token == #newest and token < newest)) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', token, 'value', ARGV[2])
return 1
