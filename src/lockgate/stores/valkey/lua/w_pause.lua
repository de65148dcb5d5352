-- Latch a pause (once), or hold it for an id not submitted yet. Returns the latch's time.
-- A(1) name  A(2) run id  A(3) timestamp  A(4) 'route': as in request_cancel
local name, id, at = A(1), A(2), A(3)
if A(4) == 'route' then
  local shard = redis.call('HGET', K('shardof'), name .. SEP .. id)
  if shard then return {'routed', shard} end
end
local run = load(name, id)
if not run then
  local hkey = K('held', name, id)
  local h = redis.call('HMGET', hkey, 'pause_at', 'expires_at')
  if h[2] and tonumber(h[2]) > NOW then
    if h[1] then return h[1] end
    redis.call('HSET', hkey, 'pause_at', at)
    return at
  end
  redis.call('DEL', hkey)
  redis.call('HSET', hkey, 'pause_at', at, 'expires_at', NOW + HELD_TTL)
  -- Relative to the server's clock, which NOW may not be: expires_at is what counts.
  redis.call('EXPIRE', hkey, math.ceil(HELD_TTL) + 60)
  return at
end
if not has(run.pause_at) and not ended(run) then
  local err = latch_pause(run, at)
  if err then return err end
end
return has(run.pause_at) and run.pause_at or at
