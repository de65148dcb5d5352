-- Latch a pause (once), or hold it for an id not submitted yet. Returns the latch's time.
-- A(1) name  A(2) run id  A(3) timestamp  A(4) 'route': as in request_cancel
local name, id, at = A(1), A(2), A(3)
local elsewhere = routed_elsewhere(A(4), name, id)
if elsewhere then return elsewhere end
local run = load(name, id)
if not run then
  local hkey = K('held', name, id)
  local h = redis.call('HMGET', hkey, 'pause_at', 'expires_at')
  if held_live(h[2]) then
    if h[1] then return h[1] end
    redis.call('HSET', hkey, 'pause_at', at)
    return at
  end
  redis.call('DEL', hkey)
  hold_controls(hkey, {'pause_at', at})
  return at
end
if not has(run.pause_at) and not ended(run) then
  local err = latch_pause(run, at)
  if err then return err end
end
return has(run.pause_at) and run.pause_at or at
