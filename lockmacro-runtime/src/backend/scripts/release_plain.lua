-- The release of one lock nobody waits for, first in the release script
-- (after mark.lua), before it defines the functions the rest needs:
-- creating those closures on every call (and collecting them) cost a
-- release nearly as much server time as its GET and DEL. One key, its
-- waiters flag named (ARGV[2]), the key a string that starts with the token
-- ARGV[1] and has no MARK at its end (no waiter found it busy: see
-- waiters.lua): deleted, 1. The flag is not read: this is the
-- compare-and-delete, and costs what it costs. Anything else goes on to
-- release.lua, as nothing was written here: a marked value, a key missing
-- or held by another token (a fair waiter giving up must still leave the
-- queue, which release.lua does), an empty flag name, several keys, a set
-- of shares at the key. string.find from 1, plain, finds the token at 1
-- only when the value starts with it, without making the prefix as a new
-- string.
if #KEYS == 1 and (ARGV[2] or '') ~= '' then
  local value = redis.pcall('GET', KEYS[1])
  if type(value) == 'string' and string.sub(value, -1) ~= MARK
      and string.find(value, ARGV[1], 1, true) == 1 then
    redis.call('DEL', KEYS[1])
    return 1
  end
end
