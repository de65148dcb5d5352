-- The Rate buckets of a workflow in this shard (toks set: the keys a claim spent a token of)
-- as kept, the runs queued per fairness bucket, and the time they were read at.
-- A(1) name
-- Returns {now, {rkey, tokens, updated, ...}, {bucket, queued, ...}}.
local name = A(1)
local buckets = {}
for _, rkey in ipairs(redis.call('SMEMBERS', K('toks', name))) do
  local state = redis.call('HMGET', K('tok', name, rkey), 'tokens', 'updated')
  if state[1] then
    buckets[#buckets + 1] = rkey
    buckets[#buckets + 1] = state[1]
    buckets[#buckets + 1] = state[2]
  end
end
return {string.format('%.6f', NOW), buckets, queued_per_bucket(name)}
