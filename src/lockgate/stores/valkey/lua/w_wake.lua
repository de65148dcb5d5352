-- End a run's open wait: the timer's path (A(3) == '', by due time) or by wait id (a sleep's
-- wake, a signal wait's or an interrupt's deadline). Journals run:woken or run:wait_timed_out,
-- closes the wait and queues the run unless it is running.
-- A(1) name  A(2) run id  A(3) the event to journal ('run:woken', 'run:wait_timed_out') or ''
-- for the timer path  A(4) wait id (by id) or due_by (timer path)  A(5) fence lease or ''
local WOKEN, TIMED_OUT = 'run:woken', 'run:wait_timed_out'

-- Whether a signal named signal_name is buffered for run (entries are name SEP id SEP record).
local function signal_buffered(run, signal_name)
  if type(signal_name) ~= 'string' then return false end
  for _, entry in ipairs(redis.call('LRANGE', K('sig', run.name, run.id), 0, -1)) do
    if string.sub(entry, 1, #signal_name + 1) == signal_name .. SEP then return true end
  end
  return false
end

-- Whether run's journal holds an event of kind ending the wait wait_id (newest first).
local function journaled(run, kind, wait_id)
  local top = '+'
  while true do
    local page = redis.call('XREVRANGE', events_key(run.name, run.id), top, '-', 'COUNT', 500)
    for _, entry in ipairs(page) do
      local fields = entry[2]
      local k, p
      for i = 1, #fields, 2 do
        if fields[i] == 'k' then k = fields[i + 1] elseif fields[i] == 'p' then p = fields[i + 1] end
      end
      if k == kind and cjson.decode(p).wait_id == wait_id then return true end
    end
    if #page < 500 then return false end
    top = '(' .. page[#page][1]
  end
end

-- Journal kind for wait, close it and queue the run when nobody runs it.
local function resolve(run, wait, kind, lease)
  local payload = {call_index = wait.call_index, wait_id = wait.wait_id}
  local err = append(run, {event(kind, payload)}, has(lease) and run.epoch or nil)
  if err then return err end
  close_wait(run)
  if not has(lease) and not held(run) then enqueue(run) end
  return 'resolved'
end

local function by_timer(name, id, due_by)
  local run = load(name, id)
  -- A successor set aside for a hand-on across shards that did not finish: the store's side
  -- finishes it (it reads the run it takes over from, in another shard).
  if run and handing_over(run) then return 'handoff' end
  if not run or not has(run.wait) or not has(run.wait_due) or tonumber(run.wait_due) > due_by then
    return 'superseded'
  end
  local wait = cjson.decode(run.wait)
  if SIGNAL_WAITS[wait.kind] then
    if signal_buffered(run, wait.signal) then return 'superseded' end
    return resolve(run, wait, TIMED_OUT, nil)
  elseif wait.kind == 'sleep' or wait.kind == 'start' then
    return resolve(run, wait, WOKEN, nil)
  end
  return 'superseded'
end

local function by_id(name, id, kind, wait_id, lease)
  local run = load(name, id)
  if not run then return fail('NOT_FOUND', name .. SEP .. id) end
  if has(lease) then
    local err = check_fence(run, lease)
    if err then return err end
  end
  local wait = has(run.wait) and cjson.decode(run.wait) or nil
  local kinds = kind == TIMED_OUT and SIGNAL_WAITS or {sleep = true, start = true}
  if not wait or tostring(wait.wait_id) ~= wait_id or not kinds[wait.kind] then
    return journaled(run, kind, wait_id) and 'duplicate' or 'superseded'
  end
  if kind == TIMED_OUT and signal_buffered(run, wait.signal) then return 'superseded' end
  return resolve(run, wait, kind, lease)
end

if has(A(3)) then return by_id(A(1), A(2), A(3), A(4), A(5)) end
return by_timer(A(1), A(2), tonumber(A(4)))
