-- Put a claimed run back on the queue, counting it against its budget.
-- A(1) name  A(2) run id  A(3) lease or ''  A(4) reason
local run = load(A(1), A(2))
if not run or (has(A(3)) and run.lock ~= A(3)) then return 'OK' end
local err = requeue(run, A(4))
if err then return err end
return 'OK'
