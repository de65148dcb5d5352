-- Park a run on a wait, fenced by its lease: journal the events, open the wait (arming its
-- timer), drop the lock and leave the queue. Answers 'superseded', writing nothing, when the
-- wait could be answered at once.
-- A(1) name  A(2) run id  A(3) lease  A(4) events (JSON)  A(5) the wait (JSON)  A(6) its due
-- time or ''  A(7) its kind  A(8) the signal it takes, or ''

-- Whether a signal named signal_name is buffered for run (entries are name SEP id SEP record).
local function signal_buffered(run, signal_name)
  for _, entry in ipairs(redis.call('LRANGE', K('sig', run.name, run.id), 0, -1)) do
    if string.sub(entry, 1, #signal_name + 1) == signal_name .. SEP then return true end
  end
  return false
end

local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
local err = check_fence(run, A(3))
if err then return err end
local kind, signal_name = A(7), A(8)
if has(run.cancel_at)
  or redis.call('HLEN', K('upd', run.name, run.id)) > 0
  or (SIGNAL_WAITS[kind] and has(signal_name) and signal_buffered(run, signal_name))
  or (kind == 'pause' and not has(run.pause_at)) then
  return 'superseded'
end
err = append(run, cjson.decode(A(4)), run.epoch)
if err then return err end
open_wait(run, A(5), A(6))
set_lock(run, nil)
dequeue(run)
return 'parked'
