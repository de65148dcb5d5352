-- Hand a claimed run on to a successor, in one step: create the successor, move to it the
-- run's buffered signals (and their send keys), pending updates and latched pause or cancel,
-- and end the run with run:continued, fenced by the lease. A repeat returns the successor.
-- A(1) name  A(2) run id  A(3) lease  A(4) successor id  A(5) successor fields (JSON flat list)
-- A(6) successor opening events (JSON)  A(7) the run:continued event (JSON events)
local CONTINUED, CANCEL = 'run:continued', 'run:cancel'

-- The fields of a stream entry as a table.
local function entry_fields(entry)
  local fields = {}
  for i = 1, #entry[2], 2 do fields[entry[2][i]] = entry[2][i + 1] end
  return fields
end

-- Whether run's last event hands it on to successor_id.
local function handed_on_to(run, successor_id)
  local last = redis.call('XREVRANGE', events_key(run.name, run.id), '+', '-', 'COUNT', 1)[1]
  if not last then return false end
  local fields = entry_fields(last)
  return fields.k == CONTINUED and cjson.decode(fields.p).run_id == successor_id
end

-- The detail (JSON) of run's latest run:cancel, as latched: cut out of the payload latch_cancel
-- wrote, so its numbers are kept exactly; re-encoded only for a payload of another shape.
local function cancel_detail(run)
  local top = '+'
  while true do
    local page = redis.call('XREVRANGE', events_key(run.name, run.id), top, '-', 'COUNT', 100)
    for _, entry in ipairs(page) do
      local fields = entry_fields(entry)
      if fields.k == CANCEL then
        local detail = string.match(fields.p, '^{"requested_at":"[^"]*","detail":(.*)}$')
        if detail then return detail end
        local decoded = cjson.decode(fields.p).detail
        if type(decoded) ~= 'table' then return '{}' end
        return cjson.encode(decoded)
      end
    end
    if #page < 100 then return '{}' end
    top = '(' .. page[#page][1]
  end
end

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
local successor = insert_run(name, successor_id, cjson.decode(A(5)), cjson.decode(A(6)), '', '')
if successor.err then return successor end
for _, suffix in ipairs({'sig', 'sigk', 'upd'}) do move(suffix, run, successor) end
if has(run.pause_at) then
  err = latch_pause(successor, run.pause_at)
  if err then return err end
end
if has(run.cancel_at) then
  err = latch_cancel(successor, run.cancel_at, cancel_detail(run))
  if err then return err end
end
err = append(run, cjson.decode(A(7)), run.epoch)
if err then return err end
return successor_id
