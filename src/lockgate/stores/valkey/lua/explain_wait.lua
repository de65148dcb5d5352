-- Why a queued run has not started: {queued?, position, holding, tokens or ''}.
-- A(1) name  A(2) run id
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
if not queued(run) then return false end
local q = K('q', run.name, run.bucket)
local position = redis.call('ZCOUNT', q, '-inf', '(' .. run.queued) + 1
local holding = has(run.ckey) and redis.call('SCARD', K('slot', run.name, run.ckey)) or 0
local tokens = ''
if has(run.rkey) and has(run.rps) then
  local capacity = tonumber(has(run.rburst) and run.rburst or '1')
  local state = redis.call('HMGET', K('tok', run.name, run.rkey), 'tokens', 'updated')
  if state[1] then
    tokens = tostring(math.min(capacity, tonumber(state[1]) + math.max(0, NOW - tonumber(state[2])) * tonumber(run.rps)))
  else
    tokens = tostring(capacity)
  end
end
return {position, holding, tokens}
