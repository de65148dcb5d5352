-- Note that a lease's holder saw its event loop blocked: a lapse of that lease with no heartbeat
-- or claim since (its lock expiry unchanged) is then loop-blocked (see lapse in _lib.lua).
-- A(1) name  A(2) run id  A(3) lease. Returns 1 when noted, 0 when the lease holds no lock.
local run = load(A(1), A(2))
if not run or ended(run) or run.lock ~= A(3) then return 0 end
set(run, 'blocked_lease', A(3))
set(run, 'blocked_until', run.lock_expires)
return 1
