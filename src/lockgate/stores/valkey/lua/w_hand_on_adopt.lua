-- Step 4 of a hand-on across shards (see w_hand_on_create), in the successor's shard.
-- A(1) name  A(2) successor id  A(3) 'adopt' (A(4): what the run held, as w_hand_off answers
-- it), 'rearm' (the run has not ended: look again a lease's time later) or 'abandon' (the run
-- ended another way: end the successor, which never ran)
-- Returns 'adopted', 'pending', 'abandoned', or 'settled' when the successor is not set aside.
local name, id, step = A(1), A(2), A(3)
local run = load(name, id)
if not run then return fail('NOT_FOUND', name .. SEP .. id) end
if not handing_over(run) then return 'settled' end
local timer = name .. SEP .. id
if step == 'rearm' then
  redis.call('ZADD', K('timers'), NOW + LOCK_TTL, timer)
  return 'pending'
end
set(run, 'handoff', '')
redis.call('ZREM', K('timers'), timer)
if step == 'abandon' then
  local err = append(run, {event('run:error', {
    code = 'hand_on_abandoned',
    message = 'the run ' .. run.handoff_from .. ' this one was to take over ended another way',
    error = {type = 'lockgate:hand_on', message = 'hand-on abandoned', code = 'hand_on_abandoned'},
  })}, nil)
  if err then return err end
  return 'abandoned'
end
local held = cjson.decode(A(4))
local sig = K('sig', name, id)
-- A held signal whose send key the successor already has was sent to it again while it was
-- set aside (a client that found the run ended and followed it): that copy is the one kept.
local keys = K('sigk', name, id)
for i = #held.sig, 1, -1 do
  local _, signal_id = string.match(held.sig[i], '^(.-)' .. SEP .. '(.-)' .. SEP)
  if not (signal_id and redis.call('HEXISTS', keys, signal_id) == 1) then
    redis.call('LPUSH', sig, held.sig[i])
  end
end
for _, suffix in ipairs({'sigk', 'upd', 'updr'}) do
  local flat = held[suffix] or {}
  for i = 1, #flat, 2 do redis.call('HSETNX', K(suffix, name, id), flat[i], flat[i + 1]) end
end
if has(held.pause_at) and not has(run.pause_at) then
  local err = latch_pause(run, held.pause_at)
  if err then return err end
end
if has(held.cancel_at) and not has(run.cancel_at) then
  local err = latch_cancel(run, held.cancel_at, held.cancel_detail)
  if err then return err end
end
enqueue(run)
return 'adopted'
