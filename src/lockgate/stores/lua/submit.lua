-- Create a run and journal its opening events, honouring an idempotency key.
-- A(1) name  A(2) run id  A(3) run fields (JSON flat list)  A(4) opening events (JSON)
-- A(5) the delayed start's wait (JSON) or ''  A(6) its due time or ''
-- A(7) idempotency key or ''  A(8) body hash or ''  A(9) seconds the key is kept
local name, id = A(1), A(2)
local ikey = has(A(7)) and K('idem', name, A(7)) or nil
if ikey then
  local rec = redis.call('HMGET', ikey, 'run_id', 'body_hash', 'expires_at')
  if rec[1] and tonumber(rec[3]) > NOW then
    if has(A(8)) and has(rec[2]) and rec[2] ~= A(8) then
      return fail('IDEMPOTENCY', 'idempotency key ' .. A(7) .. ' of ' .. name ..
        ' was first used for a different request (run ' .. rec[1] .. '); that run is unchanged')
    end
    return rec[1]
  end
end
local run = insert_run(name, id, cjson.decode(A(3)), cjson.decode(A(4)), A(5), A(6))
if run.err then return run end
if ikey then
  redis.call('HSET', ikey, 'run_id', id, 'body_hash', A(8), 'expires_at', NOW + tonumber(A(9)))
  redis.call('EXPIRE', ikey, math.ceil(tonumber(A(9))) + 60)  -- a backstop; the clock judges
end
return id
