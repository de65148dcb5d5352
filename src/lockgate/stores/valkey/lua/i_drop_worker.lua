-- Drop a worker's record (a clean stop).
-- A(1) worker id
redis.call('HDEL', K('wk'), A(1))
redis.call('ZREM', K('wkx'), A(1))
return true
