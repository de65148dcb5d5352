-- The Limit keys of a workflow in use in this shard: the slots each holds (its slot set's
-- size, with the largest max of a run holding one) and the runs queued per fairness bucket.
-- Reads the runs holding locks (locks zset) and the queue buckets (qb set), not every run.
-- A(1) name
-- Returns {{ckey, held, max or '', ...}, {bucket, queued, ...}}.
local name = A(1)
local most, running = {}, {}
for _, id in ipairs(redis.call('ZRANGE', K('locks', name), 0, -1)) do
  local gate = redis.call('HMGET', run_key(name, id), 'ckey', 'cmax')
  if gate[1] and gate[1] ~= '' then
    local cmax = tonumber(gate[2] or '')
    if most[gate[1]] == nil then most[gate[1]] = -1 end
    if cmax and cmax > most[gate[1]] then most[gate[1]] = cmax end
  end
end
for ckey, cmax in pairs(most) do
  local held = redis.call('SCARD', K('slot', name, ckey))
  if held > 0 then
    running[#running + 1] = ckey
    running[#running + 1] = held
    running[#running + 1] = cmax >= 0 and tostring(cmax) or ''
  end
end
return {running, queued_per_bucket(name)}
