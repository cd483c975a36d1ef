-- Prepended to the scripts that take, refresh, release, inspect or clear
-- shares (before kinds.lua and leases.lua). A lock keeps its holder's
-- metadata in its value; a share (see acquire_shared.lua) is a member of a
-- sorted set, which has room for none, so the metadata of the shares of a
-- key is a hash beside it: field the holder's token (for the write too,
-- whose member is 'w:' and the token, so that a downgrade keeps it), value
-- the metadata. A share taken with empty metadata writes no field, and a
-- key none of whose shares has any has no hash.
--
-- The hash is kept no longer than the set: each call that writes a field
-- or extends a share (acquire_shared.lua, grant.lua, leases.lua's extend)
-- gives it the set's expiry, which is at least every live share's; a
-- release takes its holder's field out, or the hash with the last share;
-- the sweep of expired shares (kinds.lua's set_shares) takes the fields of
-- the members it drops; a forced release deletes it with the set.
--
-- Every call on it is redis.pcall: a user denied the hash commands, or a
-- hash name holding another client's data, still locks, and its shares
-- show no metadata; nothing after a script's first write may fail.

-- The name of the hash of `key`'s shares' metadata, in the key's cluster
-- slot: 'K:holders' for a key with a hash tag, '{K}:holders' for a key
-- without a '}' (`derived_holders_key`). A key with a '}' but no hash tag
-- has no name in its slot (it is hashed whole), and keeps no metadata for
-- its shares: nil.
local function holders_key(key)
  local open = string.find(key, '{', 1, true)
  local close = open and string.find(key, '}', open + 1, true)
  if close and close > open + 1 then
    return key .. ':holders'
  end
  if string.find(key, '}', 1, true) then
    return nil
  end
  return '{' .. key .. '}:holders'
end
