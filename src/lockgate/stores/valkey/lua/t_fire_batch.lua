-- Submit the run of a batch buffered outside the store (a trigger topic's consumer) and move
-- its key's fired-through mark in the batch's source, in one step (Store.fire_batch).
-- A(1) name  A(2) run id  A(3) the mark's field (source SEP key)  A(4) first  A(5) last
-- A(6) the run's hash fields (JSON flat list)  A(7) its opening events (JSON)
-- Answers {run id or '', the mark after}.
local name, id = A(1), A(2)
local mkey = K('tfired', name)
local mark = tonumber(redis.call('HGET', mkey, A(3)) or '-1')
local first, last = tonumber(A(4)), tonumber(A(5))
if redis.call('EXISTS', run_key(name, id)) == 1 then
  -- A repeated fire: the same batch, the same run.
  if mark < last then
    mark = last
    redis.call('HSET', mkey, A(3), A(5))
  end
  return {id, string.format('%d', mark)}
end
if mark >= first then return {'', string.format('%d', mark)} end
local run = insert_run(name, id, cjson.decode(A(6)), cjson.decode(A(7)), '', '')
if run.err then return run end
redis.call('HSET', mkey, A(3), A(5))
return {id, A(5)}
