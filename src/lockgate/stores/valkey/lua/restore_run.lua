-- Restore one run the Valkey tier lost, from its journal (lockgate store rebuild), whole and in
-- this one step: its hash, its outbox, its place in its workflow's list, and its queue entry or
-- its wait (arming its timer) or its place among ended runs. Does nothing when the run's hash
-- exists: a repeat of the rebuild, or a run a client or worker made meanwhile. No other script
-- creates a run's hash but submit and hand-on ones (which create a run whole), and each script
-- on a run refuses when its hash is gone, so a hash here is a complete run.
-- A(1) name  A(2) run id  A(3) run fields (JSON flat list, with submitted_at, last_seq, epoch)
-- A(4) the outbox: the journal as entries [run_seq, kind, payload JSON, schema, headers JSON]
-- (JSON list; [] for a run that ended)  A(5) the open wait (JSON) or ''  A(6) its due time or ''
-- A(7) 'queue', 'wait' or 'ended'  A(8) when it ended (for 'ended')
-- Returns 'restored' or 'present'.
local name, id, mode = A(1), A(2), A(7)
local key = run_key(name, id)
if redis.call('EXISTS', key) == 1 then return 'present' end
local ekey = events_key(name, id)
redis.call('DEL', ekey)
for _, e in ipairs(cjson.decode(A(4))) do
  redis.call('XADD', ekey, '0-' .. e[1], 'k', e[2], 'p', e[3], 'v', e[4], 'h', e[5])
end
local order = redis.call('INCR', K('ord', name))
redis.call('HSET', key, 'ord', order, unpack(cjson.decode(A(3))))
redis.call('ZADD', K('runs', name), order, id)
if mode == 'ended' then
  redis.call('ZADD', K('ended'), tonumber(A(8)), name .. SEP .. id)
  return 'restored'
end
local run = load(name, id)
if has(A(5)) then open_wait(run, A(5), A(6)) end
if mode == 'queue' then enqueue(run) end
return 'restored'
