-- Requeue every run of a workflow whose lease has lapsed; returns the ids of those not ended.
-- A(1) name  A(2) the time to judge by, or '' for now
-- A(3) poison max retries, or '' for no poison policy  A(4) its TTL (s)  A(5) '1' when
-- loop-blocked lapses count as crashes
local name = A(1)
local at = has(A(2)) and tonumber(A(2)) or NOW
local recovered = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', K('locks', name), '-inf', at)) do
  local run = load(name, id)
  if run and locked(run) then
    if not ended(run) then table.insert(recovered, id) end
    local err = lapse(run, A(3), A(4), A(5))
    if err then return err end
  else
    redis.call('ZREM', K('locks', name), id)
  end
end
return recovered
