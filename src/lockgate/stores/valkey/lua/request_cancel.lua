-- Latch a cancel (once), or hold it for an id not submitted yet.
-- A(1) name  A(2) run id  A(3) timestamp  A(4) detail (JSON)
-- A(5) 'route' when called namespace-wide for an id no shard holds: answers {'routed', shard}
-- instead, writing nothing, once the id is routed to a shard (its control goes there)
local name, id, at = A(1), A(2), A(3)
if A(5) == 'route' then
  local shard = redis.call('HGET', K('shardof'), name .. SEP .. id)
  if shard then return {'routed', shard} end
end
local run = load(name, id)
if not run then
  local hkey = K('held', name, id)
  local h = redis.call('HMGET', hkey, 'cancel_at', 'expires_at')
  if h[1] and h[2] and tonumber(h[2]) > NOW then return h[1] end
  if not (h[2] and tonumber(h[2]) > NOW) then redis.call('DEL', hkey) end
  redis.call('HSET', hkey, 'cancel_at', at, 'cancel_detail', A(4), 'expires_at', NOW + HELD_TTL)
  redis.call('EXPIRE', hkey, math.ceil(HELD_TTL) + 60)  -- a backstop; the clock judges
  return at
end
if has(run.cancel_at) or ended(run) then
  return has(run.cancel_at) and run.cancel_at or at
end
local err = latch_cancel(run, at, A(4))
if err then return err end
return at
