-- A hand-on across shards takes five steps, since one script reaches one shard:
--   1. w_hand_off 'check' (the run's shard): the lease holds the run, or nothing is written
--   2. this script (the successor's shard): create the successor, set aside: not queued, with
--      a timer at the lease's horizon in case the worker goes before step 4
--   3. w_hand_off 'hand' (the run's shard): end the run run:continued, fenced by the lease
--   4. w_hand_on_adopt 'adopt' (the successor's shard): take over what the run held, queue it
--   5. w_hand_off 'clear' (the run's shard): drop what the run held
-- Each step repeats safely (the successor's id is fixed). A worker that goes after step 2
-- leaves the successor set aside: its timer has the store finish step 4 once the run was handed
-- on, wait while the run has not ended, or end the successor when the run ended another way.
-- A(1) name  A(2) run id  A(3) successor id  A(4) successor fields (JSON flat list)
-- A(5) successor opening events (JSON)  A(6) controls held namespace-wide for it (JSON)
local name, id, successor_id = A(1), A(2), A(3)
if redis.call('HGET', run_key(name, successor_id), 'handoff_from') == id then return successor_id end
local fields = cjson.decode(A(4))
for _, value in ipairs({'handoff', id, 'handoff_from', id}) do table.insert(fields, value) end
local successor = insert_run(name, successor_id, fields, cjson.decode(A(5)), '', '', cjson.decode(A(6)))
if successor.err then return successor end
redis.call('ZADD', K('timers'), NOW + LOCK_TTL, name .. SEP .. successor_id)
return successor_id
