-- An idempotency record while it lives: {run id, body hash ('' for none)}, else nil.
-- A(1) name  A(2) key
local rec = redis.call('HMGET', K('idem', A(1), A(2)), 'run_id', 'body_hash', 'expires_at')
if rec[1] and rec[3] and tonumber(rec[3]) > NOW then return {rec[1], rec[2] or ''} end
return false
