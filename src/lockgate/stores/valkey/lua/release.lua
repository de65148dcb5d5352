-- Drop the lock (only that lease's, when one is named); a run neither ended nor parked is
-- queued again. A(1) name  A(2) run id  A(3) lease or ''  A(4) 'hand_back' to queue a parked run's too
local run = load(A(1), A(2))
if not run or (has(A(3)) and run.lock ~= A(3)) then return 'OK' end
set_lock(run, nil)
if not ended(run) and (not has(run.wait) or A(4) == 'hand_back') then enqueue(run) end
return 'OK'
