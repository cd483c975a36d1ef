-- Prepended to the scripts that take, release or inspect a lock; first in
-- the release, so it defines no function (see release_plain.lua).
--
-- MARK, one byte at the end of a lock's value (the token, then metadata),
-- says that someone may wait for the lock's release (see waiters.lua).
-- NUL: no token (hex) ends with it, and metadata only when its user put one
-- there, which costs that user's releases the read of the flag, nothing
-- else. The token stays a prefix of the value; whoever compares a whole
-- value, or shows its metadata, accepts or drops one trailing MARK.
local MARK = '\0'
