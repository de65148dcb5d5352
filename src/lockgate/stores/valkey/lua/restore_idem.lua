-- Keep an idempotency record again after a rebuild (lockgate store rebuild), in the slot that
-- keeps such records, unless a live one holds the key (a submit made it meanwhile).
-- A(1) name  A(2) key  A(3) run id  A(4) body hash or ''  A(5) when the record expires
-- Returns 1 if kept, else 0 (a live record holds the key, or this one has expired).
local ikey = K('idem', A(1), A(2))
local until_at = tonumber(A(5))
if until_at <= NOW then return 0 end
local expires_at = redis.call('HGET', ikey, 'expires_at')
if expires_at and tonumber(expires_at) > NOW then return 0 end
redis.call('DEL', ikey)
redis.call('HSET', ikey, 'run_id', A(3), 'body_hash', A(4), 'expires_at', until_at)
redis.call('EXPIRE', ikey, math.ceil(until_at - NOW) + 60)  -- a backstop; the clock judges
return 1
