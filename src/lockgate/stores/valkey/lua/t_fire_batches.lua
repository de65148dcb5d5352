-- Submit the runs of many batches buffered outside the store and move their keys'
-- fired-through marks (Store.fire_batches): for each batch in turn, what t_fire_batch does,
-- all in one step, so a consumer's pass fires the batches of a shard in one script.
-- A(1) name  A(2) how many batches; then six arguments per batch, from A(3): run id, the
-- mark's field (source SEP key), first, last, the run's hash fields (JSON flat list), its
-- opening events (JSON)
-- Answers a flat list, three items per batch: {run id or '', the mark after, '1' when this
-- step made the run and its outbox holds the opening events alone, else '0' (a control held
-- for the id and latched beside them is read back from the outbox)}. A run that cannot be inserted ends the step with its error,
-- the batches before it fired.
local name, count = A(1), tonumber(A(2))
local mkey = K('tfired', name)
local answer = {}
for i = 0, count - 1 do
  local at = 3 + 6 * i
  local id, field, last_text = A(at), A(at + 1), A(at + 3)
  local first, last = tonumber(A(at + 2)), tonumber(last_text)
  local mark = tonumber(redis.call('HGET', mkey, field) or '-1')
  if redis.call('EXISTS', run_key(name, id)) == 1 then
    -- A repeated fire: the same batch, the same run.
    if mark < last then
      mark = last
      redis.call('HSET', mkey, field, last_text)
    end
    answer[#answer + 1] = id
    answer[#answer + 1] = string.format('%d', mark)
    answer[#answer + 1] = '0'
  elseif mark >= first then
    answer[#answer + 1] = ''
    answer[#answer + 1] = string.format('%d', mark)
    answer[#answer + 1] = '0'
  else
    local opening = cjson.decode(A(at + 5))
    local run = insert_run(name, id, cjson.decode(A(at + 4)), opening, '', '')
    if run.err then return run end
    redis.call('HSET', mkey, field, last_text)
    answer[#answer + 1] = id
    answer[#answer + 1] = last_text
    answer[#answer + 1] = tonumber(run.last_seq) == #opening and '1' or '0'
  end
end
return answer
