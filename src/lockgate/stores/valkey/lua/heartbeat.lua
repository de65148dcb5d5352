-- Extend a lease. A(1) name  A(2) run id  A(3) lease. Returns {cancel_at, pause_at}.
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
if run.lock ~= A(3) or not held(run) then
  return fail('LOCK_LOST', 'lease ' .. A(3) .. ' no longer holds run ' .. A(2))
end
set(run, 'lock_expires', NOW + LOCK_TTL)
redis.call('ZADD', K('locks', run.name), NOW + LOCK_TTL, run.id)
return {run.cancel_at or '', run.pause_at or ''}
