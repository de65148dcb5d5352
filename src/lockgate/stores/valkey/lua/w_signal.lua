-- Buffer a signal, delivering it to a run that waits on its name (a signal wait, or the
-- interrupt the signal answers); once per idempotency key.
-- A(1) name  A(2) run id  A(3) signal name  A(4) the entry (name SEP signal id SEP record JSON)
-- A(5) idempotency key or ''. Returns 'delivered', 'buffered', 'rejected', or 'duplicate' for a
-- key already used on this run (nothing kept).
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
local keys = K('sigk', run.name, run.id)
if has(A(5)) then
  local seen = redis.call('HGET', keys, A(5))
  if seen then return 'duplicate' end
end
if ended(run) or has(run.cancel_at) then return 'rejected' end
redis.call('RPUSH', K('sig', run.name, run.id), A(4))
local result = 'buffered'
if has(run.wait) then
  local wait = cjson.decode(run.wait)
  if SIGNAL_WAITS[wait.kind] and wait.signal == A(3) then
    close_wait(run)
    if not held(run) then enqueue(run) end
    result = 'delivered'
  end
end
if has(A(5)) then redis.call('HSET', keys, A(5), result) end
return result
