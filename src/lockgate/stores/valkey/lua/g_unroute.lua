-- Drop the idempotency record g_route kept for a submit that then failed, unless it names
-- another run by now. A(1) name  A(2) idempotency key  A(3) run id
local ikey = K('idem', A(1), A(2))
if redis.call('HGET', ikey, 'run_id') == A(3) then redis.call('DEL', ikey) end
return 'OK'
