-- Latch a cancel (once), or hold it for an id not submitted yet.
-- A(1) name  A(2) run id  A(3) timestamp  A(4) detail (JSON)
-- A(5) 'route' when called namespace-wide for an id no shard holds: answers {'routed', shard}
-- instead, writing nothing, once the id is routed to a shard (its control goes there)
local name, id, at = A(1), A(2), A(3)
local elsewhere = routed_elsewhere(A(5), name, id)
if elsewhere then return elsewhere end
local run = load(name, id)
if not run then
  local hkey = K('held', name, id)
  local h = redis.call('HMGET', hkey, 'cancel_at', 'expires_at')
  if h[1] and held_live(h[2]) then return h[1] end
  if not held_live(h[2]) then redis.call('DEL', hkey) end
  hold_controls(hkey, {'cancel_at', at, 'cancel_detail', A(4)})
  return at
end
if has(run.cancel_at) or ended(run) then
  return has(run.cancel_at) and run.cancel_at or at
end
local err = latch_cancel(run, at, A(4))
if err then return err end
return at
