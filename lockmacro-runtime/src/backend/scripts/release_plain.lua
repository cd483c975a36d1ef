-- The release of one lock nobody waits for, first in the release script,
-- before it defines the functions the rest needs: creating those closures
-- on every call (and collecting them) cost a release nearly as much server
-- time as its GET and DEL. The same steps release.lua takes in this case:
-- one key, its waiters flag named (ARGV[2]) and not set (see waiters.lua),
-- the key a string: deleted when its value starts with the token ARGV[1]
-- (1), else left alone (0); missing: 0. Anything else (a set flag, an
-- empty flag name, several keys, a set of shares at the key) goes on to
-- release.lua, as nothing was written here. The flag is read with GET,
-- as release.lua reads it, so that a user allowed what the release needed
-- before needs nothing more. string.find from 1, plain,
-- finds the token at 1 only when the value starts with it, without making
-- the prefix as a new string.
if #KEYS == 1 and (ARGV[2] or '') ~= '' and redis.pcall('GET', ARGV[2]) == false then
  local value = redis.pcall('GET', KEYS[1])
  if value == false then
    return 0
  end
  if type(value) == 'string' then
    if string.find(value, ARGV[1], 1, true) == 1 then
      redis.call('DEL', KEYS[1])
      return 1
    end
    return 0
  end
end
