-- Record key -> run id, without a body hash, unless a live record holds the key: 1 if set, else 0.
-- A(1) name  A(2) key  A(3) run id  A(4) seconds the record lives
local ikey = K('idem', A(1), A(2))
local expires_at = redis.call('HGET', ikey, 'expires_at')
if expires_at and tonumber(expires_at) > NOW then return 0 end
local ttl = tonumber(A(4))
redis.call('DEL', ikey)
redis.call('HSET', ikey, 'run_id', A(3), 'body_hash', '', 'expires_at', NOW + ttl)
-- A backstop for a store nobody maintains; run_maintenance drops it on time.
redis.call('EXPIRE', ikey, math.ceil(ttl) + 60)
return 1
