-- Hand a claimed run on to a successor, in one step: create the successor, move to it the
-- run's buffered signals (and their send keys), pending updates and latched pause or cancel,
-- and end the run with run:continued, fenced by the lease. A repeat returns the successor.
-- A(1) name  A(2) run id  A(3) lease  A(4) successor id  A(5) successor fields (JSON flat list)
-- A(6) successor opening events (JSON)  A(7) the run:continued event (JSON events)
-- A(8) controls held namespace-wide for the successor id (JSON), or ''
-- (Across shards the hand-on takes several steps instead: w_hand_off, w_hand_on_create,
-- w_hand_on_adopt.)

-- Move key suffix (sig, sigk, upd) from run to successor.
local function move(suffix, run, successor)
  local from = K(suffix, run.name, run.id)
  if redis.call('EXISTS', from) == 1 then
    redis.call('RENAME', from, K(suffix, successor.name, successor.id))
  end
end

local name, id, lease, successor_id = A(1), A(2), A(3), A(4)
local run = load(name, id)
if not run then return fail('NOT_FOUND', name .. SEP .. id) end
if ended(run) then
  if handed_on_to(run, successor_id) then return successor_id end
  return fail('AFTER_TERMINAL', 'run ' .. id .. ' has ended; it cannot be handed on')
end
local err = check_fence(run, lease)
if err then return err end
local successor = insert_run(name, successor_id, cjson.decode(A(5)), cjson.decode(A(6)), '', '',
  has(A(8)) and cjson.decode(A(8)) or nil)
if successor.err then return successor end
for _, suffix in ipairs({'sig', 'sigk', 'upd'}) do move(suffix, run, successor) end
-- Settled update outcomes are copied: a sender that retries an update id finds it settled.
local settled = redis.call('HGETALL', K('updr', run.name, run.id))
if #settled > 0 then redis.call('HSET', K('updr', successor.name, successor.id), unpack(settled)) end
if has(run.pause_at) then
  err = latch_pause(successor, run.pause_at)
  if err then return err end
end
if has(run.cancel_at) then
  err = latch_cancel(successor, run.cancel_at, cancel_detail(run))
  if err then return err end
end
set(run, 'continued_to', successor_id)
err = append(run, cjson.decode(A(7)), run.epoch)
if err then return err end
return successor_id
