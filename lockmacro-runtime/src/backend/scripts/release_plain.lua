-- The release of one lock nobody waits for, first in the release script
-- (after mark.lua), before it defines the functions the rest needs:
-- creating those closures on every call (and collecting them) cost a
-- release nearly as much server time as its GET and DEL. ARGV[1] is the
-- lease's value as it was written (its token, then its metadata), or its
-- token alone when the caller did not have the metadata. One key whose
-- value is exactly ARGV[1] (no MARK at its end: no waiter found it busy,
-- see waiters.lua): deleted, 1. The flag is not read and not named (the
-- client leaves ARGV[2] out where the script can derive it, see
-- release.lua): this is the compare-and-delete, and costs what it costs;
-- each further argument or check here cost the server more than the GET.
-- Anything else goes on to release.lua, as nothing was written here: a
-- marked value, a key missing or held by another token (a fair waiter
-- giving up must still leave the queue, which release.lua does), a token
-- without its metadata, several keys, a set of shares at the key
-- (redis.pcall: GET of a set is an error, not the value).
if #KEYS == 1 and redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
