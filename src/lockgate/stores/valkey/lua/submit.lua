-- Create a run and journal its opening events, honouring an idempotency key.
-- A(1) name  A(2) run id  A(3) run fields (JSON flat list)  A(4) opening events (JSON)
-- A(5) the delayed start's wait (JSON) or ''  A(6) its due time or ''
-- A(7) idempotency key or ''  A(8) body hash or ''  A(9) seconds the key is kept
-- A(10) '' when this shard keeps the idempotency record (one shard), else the controls held for
-- the id namespace-wide (JSON) as g_route read them: g_route then kept the key, and a run of
-- this id already created under the same key (a retry finishing a crashed submit) is the answer
-- Answers the run id alone when the run was there before (an idempotent repeat), else the id and
-- the run's last run_seq: the opening events, and any control held for the id that it latched.
local name, id = A(1), A(2)
local routed = has(A(10)) and cjson.decode(A(10)) or nil
local ikey = has(A(7)) and not routed and K('idem', name, A(7)) or nil
if ikey then
  local first = idempotent_repeat(ikey, name, A(7), A(8))
  if first then return first end
end
if routed and has(A(7)) and redis.call('HGET', run_key(name, id), 'idem') == A(7) then return id end
local fields = cjson.decode(A(3))
if has(A(7)) then
  table.insert(fields, 'idem')
  table.insert(fields, A(7))
end
local run = insert_run(name, id, fields, cjson.decode(A(4)), A(5), A(6), routed)
if run.err then return run end
if ikey then keep_idempotency(ikey, id, A(8), tonumber(A(9))) end
return {id, run.last_seq}
