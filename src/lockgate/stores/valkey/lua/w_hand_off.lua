-- A hand-on across shards, in the run's shard (see w_hand_on_create for the steps).
-- A(1) name  A(2) run id  A(3) lease, or '' (a reader finishing a hand-on its worker left)
-- A(4) successor id  A(5) the run:continued event (JSON events), for 'hand'  A(6) the step:
--   'check'  fenced, writes nothing: 'OK', or 'handed' when the run was already handed on
--   'hand'   fenced: end the run with run:continued and answer what it holds for the successor
--   'read'   unfenced: what the run held when it was handed on to the successor, or 'pending'
--            (it has not ended) or 'abandoned' (it ended another way, or is gone)
--   'clear'  drop what the run held once the successor adopted it
-- What a run holds is a JSON object: sig (buffered signal entries), sigk, upd and updr (flat
-- lists of the send keys', pending updates' and settled outcomes' fields and values),
-- pause_at, cancel_at, cancel_detail.

local function holdings(run)
  local pause_at, cancel_at = run.pause_at or '', run.cancel_at or ''
  return cjson.encode({
    sig = redis.call('LRANGE', K('sig', run.name, run.id), 0, -1),
    sigk = redis.call('HGETALL', K('sigk', run.name, run.id)),
    upd = redis.call('HGETALL', K('upd', run.name, run.id)),
    updr = redis.call('HGETALL', K('updr', run.name, run.id)),
    pause_at = pause_at,
    cancel_at = cancel_at,
    cancel_detail = has(cancel_at) and cancel_detail(run) or '',
  })
end

local name, id, lease, successor_id, step = A(1), A(2), A(3), A(4), A(6)
local run = load(name, id)
if step == 'read' then
  if not run then return 'abandoned' end
  if not ended(run) then return 'pending' end
  return handed_on_to(run, successor_id) and holdings(run) or 'abandoned'
end
if not run then return fail('NOT_FOUND', name .. SEP .. id) end
if step == 'clear' then
  if ended(run) and handed_on_to(run, successor_id) then
    redis.call('DEL', K('sig', name, id), K('sigk', name, id), K('upd', name, id))
  end
  return 'OK'
end
if ended(run) then
  if not handed_on_to(run, successor_id) then
    return fail('AFTER_TERMINAL', 'run ' .. id .. ' has ended; it cannot be handed on')
  end
  return step == 'check' and 'handed' or holdings(run)
end
local err = check_fence(run, lease)
if err then return err end
if step == 'check' then return 'OK' end
local held = holdings(run)
set(run, 'continued_to', successor_id)
err = append(run, cjson.decode(A(5)), run.epoch)
if err then return err end
return held
