-- Claim one named run for a lease, as the inline runner does.
-- A(1) name  A(2) run id  A(3) lease  A(4..6) the poison policy, as recover.lua's A(3..5)
local name, id, lease = A(1), A(2), A(3)
local run = load(name, id)
if not run then return fail('NOT_FOUND', name .. SEP .. id) end
if ended(run) then return fail('FINISHED', 'run ' .. id .. ' of ' .. name .. ' has ended') end
if held(run) and run.lock ~= lease then
  return fail('OWNED', 'run ' .. id .. ' is held by another lease')
end
if locked(run) and run.lock ~= lease then
  -- The last holder's lease lapsed: that attempt is gone, and counts as one.
  local err = lapse(run, A(4), A(5), A(6))
  if err then return err end
  if ended(run) then return fail('FINISHED', 'run ' .. id .. ' of ' .. name .. ' ran out of retries') end
end
if run.lock ~= lease or not held(run) then
  local why = gated(run)
  if why then return fail('GATED', 'run ' .. id .. ' of ' .. name .. ' waits on its gate: ' .. why) end
end
claim(run, lease)
return 'OK'
