-- The workers whose record lapsed (or was dropped) no more than a lock TTL ago: the ones whose
-- leases takeover.lua may requeue in each shard.
-- (No arguments.)
-- Returns {worker id, ...}.
return redis.call('ZRANGEBYSCORE', K('wkx'), '(' .. (NOW - LOCK_TTL), NOW)
