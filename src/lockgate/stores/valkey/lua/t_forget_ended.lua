-- Forget runs that ended at or before a cutoff: each one's hash, journal stream, signals,
-- updates and place in its workflow's list, and its entry in the index of ended runs.
-- A(1) the cutoff (epoch seconds)  A(2) at most this many runs in one call. Returns how many.
local cutoff, limit = tonumber(A(1)), tonumber(A(2))
local gone = redis.call('ZRANGEBYSCORE', K('ended'), '-inf', cutoff, 'LIMIT', 0, limit)
for _, member in ipairs(gone) do
  local at = string.find(member, SEP, 1, true)
  local name, id = string.sub(member, 1, at - 1), string.sub(member, at + 1)
  redis.call('DEL', run_key(name, id), events_key(name, id), K('sig', name, id),
    K('sigk', name, id), K('upd', name, id), K('updr', name, id))
  redis.call('ZREM', K('runs', name), id)
  redis.call('ZREM', K('ended'), member)
end
return #gone
