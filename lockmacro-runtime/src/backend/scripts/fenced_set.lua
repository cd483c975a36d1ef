-- Fenced write: sets the hash KEYS[1] to {fence = ARGV[1], value = ARGV[2]}
-- unless it already holds a newer fence, i.e. only if token ARGV[1] is not
-- older than the newest token applied to this resource.
-- Tokens are decimal u64 without leading zeros; they are compared as strings
-- (length, then digits), because Lua numbers are doubles and lose precision
-- above 2^53. Anything else, 0 included (no lock is fenced with it, and a
-- write taken with it would let an older holder's write in over it), is
-- refused with the error BADTOKEN and changes nothing: the client refuses
-- those first, this guards the key from other clients of the script.
-- Returns 1 when written, 0 (changing nothing) when the token is stale.
local token = ARGV[1]
if not string.match(token, '^[1-9]%d*$') or #token > 20 then
  return redis.error_reply('BADTOKEN a fencing token is a decimal integer above 0')
end
local newest = redis.call('HGET', KEYS[1], 'fence')
if newest and (#token < #newest or (#token == #newest and token < newest)) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', token, 'value', ARGV[2])
return 1
