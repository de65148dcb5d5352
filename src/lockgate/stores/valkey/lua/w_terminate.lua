-- End a run now, without its worker: journal its run:error, latch the cancel, drop the lock.
-- A(1) name  A(2) run id  A(3) the run:error event (JSON events)  A(4) timestamp
-- Returns 'terminated', 'already_ended' or 'not_found'.
local run = load(A(1), A(2))
if not run then return 'not_found' end
if ended(run) then return 'already_ended' end
local err = append(run, cjson.decode(A(3)), nil)
if err then return err end
if not has(run.cancel_at) then set(run, 'cancel_at', A(4)) end
set_lock(run, nil)
return 'terminated'
