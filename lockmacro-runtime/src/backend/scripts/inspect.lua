-- What holds KEYS[1] and who waits for it, changing nothing but the sweep
-- of expired shares. KEYS[2] is its fence counter; ARGV[1] names its queue
-- of fair waiters (see acquire_fair.lua), or is empty.
-- Returns strings: the kind (kind_code, from kinds.lua; empty when nothing
-- holds the key), the fence counter's value (empty when there is none),
-- the number of live fair waiters, then three per lease: what it holds
-- ('lock', 'permit', 'read', 'write'), its holder's metadata (what follows
-- the token in a lock's value; a share's field in the hash beside the set,
-- see holders.lua), and its remaining ms (-1: no expiry). Tokens are
-- never returned.
local key, counter, queue = KEYS[1], KEYS[2], ARGV[1]
local now = clock_now()
local held = key_kind(key, now)
local kind = ''
if held and held ~= 'other' then
  kind = tostring(kind_code(held))
end
local fence = redis.pcall('GET', counter)
if type(fence) ~= 'string' then
  fence = ''
end
local waiters = 0
if queue ~= '' then
  local entries = redis.pcall('LRANGE', queue, 0, -1)
  if not entries.err then
    for _, raw in ipairs(entries) do
      if cjson.decode(raw).e > now then
        waiters = waiters + 1
      end
    end
  end
end
local reply = {kind, fence, tostring(waiters)}
local function holder(held_as, metadata, ms)
  reply[#reply + 1] = held_as
  reply[#reply + 1] = metadata
  reply[#reply + 1] = string.format('%d', ms)
end
if held == 'lock' then
  -- The metadata without the waiters' MARK (see mark.lua).
  local value = redis.call('GET', key)
  if string.sub(value, -1) == MARK then
    value = string.sub(value, 1, -2)
  end
  holder('lock', string.sub(value, 33), redis.call('PTTL', key))
elseif held and held ~= 'other' then
  -- The live shares only: set_shares (in key_kind) dropped the others, and
  -- their metadata.
  local metadata = {}
  local meta = holders_key(key)
  local fields = meta and redis.pcall('HGETALL', meta)
  if type(fields) == 'table' and not fields.err then
    for i = 1, #fields, 2 do
      metadata[fields[i]] = fields[i + 1]
    end
  end
  local members = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for i = 1, #members, 2 do
    local member = members[i]
    if member ~= 'writing' and string.sub(member, 1, 5) ~= 'kind:' then
      local held_as, token = 'permit', member
      if string.sub(member, 1, 2) == 'w:' then
        held_as, token = 'write', string.sub(member, 3)
      elseif held == 'rw' then
        held_as = 'read'
      end
      holder(held_as, metadata[token] or '', tonumber(members[i + 1]) - now)
    end
  end
end
return reply
