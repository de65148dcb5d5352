-- Lease a worker its fair share of the shards, in the namespace-wide slot: renew the leases it
-- holds, give back those over its share, and take free or expired ones up to its share.
-- A(1) worker id  A(2) lease TTL (s)  A(3) shard count
-- Keys: shard_workers (zset: worker -> when it counts as gone), shard_leases (hash: shard ->
-- worker SEP expiry). A worker's share is ceil(shards / live workers). Returns its shards.
local worker, ttl, count = A(1), tonumber(A(2)), tonumber(A(3))
local workers, leases = K('shard_workers'), K('shard_leases')
redis.call('ZREMRANGEBYSCORE', workers, '-inf', NOW)
redis.call('ZADD', workers, NOW + ttl, worker)
local share = math.ceil(count / redis.call('ZCARD', workers))

-- The holder of shard's lease while it lives, else nil.
local function holder(shard)
  local lease = redis.call('HGET', leases, shard)
  if not lease then return nil end
  local at = string.find(lease, SEP, 1, true)
  if tonumber(string.sub(lease, at + 1)) <= NOW then return nil end
  return string.sub(lease, 1, at - 1)
end

local mine = {}
for shard = 0, count - 1 do
  if holder(shard) == worker then
    if #mine < share then table.insert(mine, shard) else redis.call('HDEL', leases, shard) end
  end
end
for shard = 0, count - 1 do
  if #mine >= share then break end
  if holder(shard) == nil then table.insert(mine, shard) end
end
for _, shard in ipairs(mine) do redis.call('HSET', leases, shard, worker .. SEP .. (NOW + ttl)) end
table.sort(mine)
return mine
