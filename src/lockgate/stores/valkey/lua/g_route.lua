-- Route a new run to its shard, in the namespace-wide slot, before the shard's submit creates
-- it: honour an idempotency key, index run -> shard, and read the controls held for the id.
-- A(1) name  A(2) run id  A(3) its shard  A(4) idempotency key or ''  A(5) body hash or ''
-- A(6) seconds the key is kept  A(7) '1' to move an index entry that names another shard
-- Returns {'existing', run id} (a live key's run), {'elsewhere', shard} (the id is indexed in
-- another shard, written nothing: the caller looks there) or {'routed', held controls (JSON)}.
-- A key is kept before its run exists; if the submit then fails, g_unroute drops it again.
local name, id, shard = A(1), A(2), A(3)
local ikey = has(A(4)) and K('idem', name, A(4)) or nil
if ikey then
  local first = idempotent_repeat(ikey, name, A(4), A(5))
  if type(first) == 'table' then return first end
  if first then return {'existing', first} end
end
local index, member = K('shardof'), name .. SEP .. id
local indexed = redis.call('HGET', index, member)
if indexed and indexed ~= shard and A(7) ~= '1' then return {'elsewhere', indexed} end
redis.call('HSET', index, member, shard)
if ikey then keep_idempotency(ikey, id, A(5), tonumber(A(6))) end
local h = redis.call('HMGET', K('held', name, id), 'cancel_at', 'cancel_detail', 'pause_at', 'expires_at')
local held = {}
if h[4] and tonumber(h[4]) > NOW then
  held = {cancel_at = h[1] or nil, cancel_detail = h[2] or nil, pause_at = h[3] or nil}
end
return {'routed', cjson.encode(held)}
