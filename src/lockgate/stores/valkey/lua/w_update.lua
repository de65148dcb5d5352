-- Queue an update, and a parked run so a worker applies it.
-- A(1) name  A(2) run id  A(3) update id  A(4) its record (JSON, kept as sent)
-- Returns 'queued', 'duplicate', 'settled' or 'rejected'.
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
if redis.call('HEXISTS', K('updr', run.name, run.id), A(3)) == 1 then return 'settled' end
local pending = K('upd', run.name, run.id)
if redis.call('HEXISTS', pending, A(3)) == 1 then return 'duplicate' end
if ended(run) then return 'rejected' end
local seq = redis.call('INCR', K('useq'))
redis.call('HSET', pending, A(3), '{"seq":' .. seq .. ',"record":' .. A(4) .. '}')
if has(run.wait) and cjson.decode(run.wait).kind ~= 'start' and not held(run) then enqueue(run) end
return 'queued'
