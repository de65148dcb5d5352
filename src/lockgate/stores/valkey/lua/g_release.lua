-- Give back every shard lease a worker holds, and stop counting it as live.
-- A(1) worker id. Returns how many leases went.
local worker, leases = A(1), K('shard_leases')
redis.call('ZREM', K('shard_workers'), worker)
local flat = redis.call('HGETALL', leases)
local released = 0
for i = 1, #flat, 2 do
  if string.sub(flat[i + 1], 1, #worker + 1) == worker .. SEP then
    redis.call('HDEL', leases, flat[i])
    released = released + 1
  end
end
return released
