-- Publish a worker's record until NOW + ttl, forgetting the records that lapsed more than a
-- lock TTL ago (a lapsed one is kept that long: takeover reads it, see i_lapsed_workers).
-- Namespace-wide keys: wk (worker id -> record), wkx (worker id -> when it lapses).
-- A(1) worker id  A(2) record (JSON)  A(3) ttl (s)
local gone = redis.call('ZRANGEBYSCORE', K('wkx'), '-inf', NOW - LOCK_TTL)
if #gone > 0 then
  redis.call('HDEL', K('wk'), unpack(gone))
  redis.call('ZREMRANGEBYSCORE', K('wkx'), '-inf', NOW - LOCK_TTL)
end
redis.call('HSET', K('wk'), A(1), A(2))
redis.call('ZADD', K('wkx'), NOW + tonumber(A(3)), A(1))
return true
