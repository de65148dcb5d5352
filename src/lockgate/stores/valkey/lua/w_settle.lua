-- Record an update's outcome and (with ack) unqueue it, fenced when a lease is named.
-- A(1) name  A(2) run id  A(3) update id  A(4) outcome (JSON)  A(5) fence lease or ''
-- A(6) '1' to unqueue it
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
if has(A(5)) then
  local err = check_fence(run, A(5))
  if err then return err end
end
redis.call('HSET', K('updr', run.name, run.id), A(3), A(4))
if A(6) == '1' then redis.call('HDEL', K('upd', run.name, run.id), A(3)) end
return 'OK'
