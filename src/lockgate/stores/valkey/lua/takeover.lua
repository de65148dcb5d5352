-- Requeue every run of a workflow in this shard locked under a lease of a worker whose
-- presence lapsed, live lease or not (the caller read those workers with i_lapsed_workers,
-- namespace-wide, just before); returns the ids of those not ended. A lease names its worker
-- as the text before its first '/'. Only a run whose lock names one of them is loaded whole.
-- A(1) name  A(2) poison max retries, or '' for no poison policy  A(3) its TTL (s)
-- A(4) '1' when loop-blocked lapses count as crashes  A(5), A(6), ... the lapsed worker ids
local name = A(1)
local lapsed = {}
for i = 5, #ARGV - 6 do lapsed[A(i)] = true end
local recovered = {}
for _, id in ipairs(redis.call('ZRANGE', K('locks', name), 0, -1)) do
  local lock = redis.call('HGET', run_key(name, id), 'lock')
  local slash = lock and string.find(lock, '/', 1, true)
  if slash and lapsed[string.sub(lock, 1, slash - 1)] then
    local run = load(name, id)
    if not ended(run) then table.insert(recovered, id) end
    local err = lapse(run, A(2), A(3), A(4))
    if err then return err end
  end
end
return recovered
