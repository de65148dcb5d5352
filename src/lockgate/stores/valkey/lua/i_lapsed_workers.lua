-- The workers whose record lapsed no more than a lock TTL ago (a dropped one is forgotten):
-- those whose leases takeover.lua may requeue in each shard.
-- (No arguments.)
-- Returns {worker id, ...}.
return redis.call('ZRANGEBYSCORE', K('wkx'), '(' .. (NOW - LOCK_TTL), NOW)
