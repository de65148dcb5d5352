-- Lift a pause: end the pause wait (wait_id, or whichever is open) and queue the run, or lift
-- a latch the run has not parked on yet. A(1) name  A(2) run id  A(3) wait id or ''
-- Returns 'resolved' or 'superseded'.
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
local wait = has(run.wait) and cjson.decode(run.wait) or nil
if wait and wait.kind == 'pause' and (not has(A(3)) or tostring(wait.wait_id) == A(3)) then
  local err = append(run, {event('run:unpaused', {wait_id = wait.wait_id})}, nil)
  if err then return err end
  set(run, 'pause_at', '')
  close_wait(run)
  enqueue(run)
  return 'resolved'
end
if has(run.pause_at) and not has(A(3)) then
  set(run, 'pause_at', '')
  return 'resolved'
end
return 'superseded'
