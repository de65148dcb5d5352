-- lockgate's Valkey store: the helpers every script shares. The store prepends this file to
-- each script it loads, so each operation is one script and one atomic step.
--
-- Calling convention (every script):
--   KEYS[1]  an anchor key inside the prefix's hash tag: every key a script touches is built
--            from the prefix below and carries that tag, so it lives in the anchor's slot
--   ARGV[1]  the key prefix: a shard's, "lg:{<namespace>:<shard>}:", or the namespace-wide
--            one, "lg:{<namespace>}:" (which is also shard 0's when there is one shard)
--   ARGV[2]  "now" in epoch seconds, or "" to judge time by the server's own clock (TIME)
--   ARGV[3]  lock TTL (s)   ARGV[4] max_retries   ARGV[5] max_store_requeues   ARGV[6] held TTL (s)
--   ARGV[7...] the operation's own arguments (A(1), A(2), ...)
--
-- Errors are replies "LG:<CODE> <detail>" that the Python side turns into lockgate errors.

local P = ARGV[1]
local NOW
if ARGV[2] ~= '' then
  NOW = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local LOCK_TTL = tonumber(ARGV[3])
local MAX_RETRIES = tonumber(ARGV[4])
local MAX_STORE_REQUEUES = tonumber(ARGV[5])
local HELD_TTL = tonumber(ARGV[6])

local function A(i) return ARGV[6 + i] end
local function fail(code, detail) return redis.error_reply('LG:' .. code .. ' ' .. (detail or '')) end

-- A key: the prefix, a kind fixed in the code, then each part (a name, an id, a gate or
-- trigger key, a bucket: text from users) as ':<bytes>#<part>', so that no part can pass for
-- another whatever it holds ('billing:eu' run '42' and 'billing' run 'eu:42' are two keys).
-- stores/valkey/_keys.py builds the same keys on the Python side.
local function K(kind, ...)
  local key = P .. kind
  for i = 1, select('#', ...) do
    local part = select(i, ...)
    key = key .. ':' .. #part .. '#' .. part
  end
  return key
end
local function run_key(name, id) return K('r', name, id) end
local function events_key(name, id) return K('e', name, id) end
-- Joins a name and an id in one member (timers, ended, shardof, signal entries): safe as no
-- name or id may hold it (the store's boundary refuses control characters; lockgate/_names.py).
local SEP = '\31'

-- A journal page (XRANGE entries) cut before the entry that would bring its fields past
-- max_bytes bytes: a reply never holds more than that, bar one entry larger than it alone.
local function fit_page(entries, max_bytes)
  local bytes = 0
  for i, entry in ipairs(entries) do
    for _, field in ipairs(entry[2]) do bytes = bytes + #field end
    if bytes > max_bytes and i > 1 then
      local page = {}
      for j = 1, i - 1 do page[j] = entries[j] end
      return page
    end
  end
  return entries
end

-- The runs this call loaded (by key), so a run loaded twice is one table.
local LOADED = {}
-- The fields set on each run's hash, by key, in the order the runs were first set: written
-- with one HSET per run when the script ends (flush), not one per field, as every
-- redis.call costs the server microseconds. Reads of a run go through its table.
local DIRTY, DIRTY_KEYS = {}, {}

-- A run's hash as a table, or nil.
local function load(name, id)
  local key = run_key(name, id)
  if LOADED[key] then return LOADED[key] end
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local run = {name = name, id = id}
  for i = 1, #flat, 2 do run[flat[i]] = flat[i + 1] end
  LOADED[key] = run
  return run
end

local function set(run, field, value)
  run[field] = value
  local key = run_key(run.name, run.id)
  local fields = DIRTY[key]
  if not fields then
    fields = {}
    DIRTY[key] = fields
    table.insert(DIRTY_KEYS, key)
  end
  fields[field] = value
end

-- Write what set() kept back; the store's script wrapper calls it after every script.
local function flush()
  for _, key in ipairs(DIRTY_KEYS) do
    local flat = {}
    for field, value in pairs(DIRTY[key]) do
      flat[#flat + 1] = field
      flat[#flat + 1] = value
    end
    redis.call('HSET', key, unpack(flat))
  end
end

local function ended(run) return run.terminal ~= nil and run.terminal ~= '' end
local function locked(run) return run.lock ~= nil and run.lock ~= '' end
local function held(run) return locked(run) and tonumber(run.lock_expires or '0') > NOW end
local function has(value) return value ~= nil and value ~= '' end

-- -- the queue, split by fairness bucket -----------------------------------------------------

local function queued(run) return has(run.queued) end

-- A successor created across shards is set aside until the run it takes over from hands over
-- what it holds (w_hand_on_create, w_hand_on_adopt): nothing queues it before that.
local function handing_over(run) return has(run.handoff) end

local function enqueue(run)
  if ended(run) or queued(run) or handing_over(run) then return end
  local seq = redis.call('INCR', K('qseq'))
  redis.call('ZADD', K('q', run.name, run.bucket), seq, run.id)
  redis.call('SADD', K('qb', run.name), run.bucket)
  set(run, 'queued', seq)
end

local function dequeue(run)
  if not queued(run) then return end
  local q = K('q', run.name, run.bucket)
  redis.call('ZREM', q, run.id)
  if redis.call('ZCARD', q) == 0 then redis.call('SREM', K('qb', run.name), run.bucket) end
  set(run, 'queued', '')
end

-- -- locks and Limit slots ---------------------------------------------------------------------

local function set_lock(run, lease)
  set(run, 'lock', lease or '')
  if not lease then redis.call('ZREM', K('locks', run.name), run.id) end
  if has(run.ckey) then
    local slot = K('slot', run.name, run.ckey)
    if lease then redis.call('SADD', slot, run.id) else redis.call('SREM', slot, run.id) end
  end
end

local function check_fence(run, lease)
  if ended(run) then return fail('AFTER_TERMINAL', 'run ' .. run.id .. ' has ended; nothing more is journaled') end
  if run.lock ~= lease or not held(run) then
    return fail('LOCK_LOST', 'lease ' .. lease .. ' no longer holds run ' .. run.id)
  end
  return nil
end

-- -- waits and timers --------------------------------------------------------------------------

-- The kinds of wait a signal answers (the wait's signal field names it): a signal wait, and an
-- interrupt (ctx.interrupt), whose answer is a signal named after its wait id.
local SIGNAL_WAITS = {signal = true, interrupt = true}

local function open_wait(run, wait_json, due)
  set(run, 'wait', wait_json)
  set(run, 'wait_due', due or '')
  if has(due) then
    redis.call('ZADD', K('timers'), tonumber(due), run.name .. SEP .. run.id)
  end
end

local function close_wait(run)
  set(run, 'wait', '')
  set(run, 'wait_due', '')
  redis.call('ZREM', K('timers'), run.name .. SEP .. run.id)
end

-- -- the journal ---------------------------------------------------------------------------------

local PROGRESS = {['step:done'] = true, ['run:update_completed'] = true}
local TERMINAL = {['run:complete'] = true, ['run:error'] = true, ['run:continued'] = true}

local function terminal_status(kind, payload)
  if kind == 'run:complete' then return 'complete' end
  if kind == 'run:continued' then return 'continued' end
  local code = cjson.decode(payload).code
  if code == 'cancelled' or code == 'terminated' or code == 'quarantined' then return code end
  return 'error'
end

-- Append events ({kind, payload_json, schema_version, headers_json} each) without checks other
-- than the terminal rule; the caller checked the fence. epoch stamps lg-epoch when given.
local function append(run, events, epoch)
  if ended(run) then return fail('AFTER_TERMINAL', 'run ' .. run.id .. ': no event may follow a terminal one') end
  for i = 1, #events - 1 do
    if TERMINAL[events[i][1]] then return fail('AFTER_TERMINAL', 'run ' .. run.id .. ': no event may follow a terminal one') end
  end
  local seq = tonumber(run.last_seq or '0')
  local progress = false
  local ekey = events_key(run.name, run.id)
  for _, e in ipairs(events) do
    seq = seq + 1
    local headers = e[4]
    if epoch then
      local h = cjson.decode(headers)
      if type(h) ~= 'table' or next(h) == nil then h = {} end
      h['lg-epoch'] = tostring(epoch)
      headers = cjson.encode(h)
    end
    redis.call('XADD', ekey, '0-' .. seq, 'k', e[1], 'p', e[2], 'v', e[3], 'h', headers)
    if PROGRESS[e[1]] then progress = true end
  end
  set(run, 'last_seq', seq)
  if progress then
    set(run, 'owner_gone', 0)
    set(run, 'store_requeues', 0)
  end
  local last = events[#events]
  if last and TERMINAL[last[1]] then
    set(run, 'terminal', terminal_status(last[1], last[2]))
    set(run, 'ended_at', NOW)
    dequeue(run)
    close_wait(run)
    set_lock(run, nil)
    redis.call('ZADD', K('ended'), NOW, run.name .. SEP .. run.id)
  end
  return nil
end

local function event(kind, payload_table)
  return {kind, cjson.encode(payload_table), '1', '{}'}
end

-- -- gates ---------------------------------------------------------------------------------------

-- Why run cannot start now, or nil, having then spent its Rate token. A Limit refusal spends
-- nothing. A Rate refusal also returns the seconds until the bucket has a token (nil if it never
-- refills). Times are written as numbers, not tostring()'d: that keeps 14 digits, a tenth of a
-- millisecond of an epoch time, and a refill measured from a rounded time could pass a claim early.
local function gated(run)
  if has(run.ckey) and has(run.cmax) then
    local slot = K('slot', run.name, run.ckey)
    local holding = redis.call('SCARD', slot) - redis.call('SISMEMBER', slot, run.id)
    if holding >= tonumber(run.cmax) then
      return 'Limit ' .. run.ckey .. ' ' .. holding .. '/' .. run.cmax
    end
  end
  if has(run.rkey) and has(run.rps) then
    local tk = K('tok', run.name, run.rkey)
    local capacity = tonumber(has(run.rburst) and run.rburst or '1')
    local state = redis.call('HMGET', tk, 'tokens', 'updated')
    local tokens = capacity
    if state[1] then
      local elapsed = math.max(0, NOW - tonumber(state[2]))
      tokens = math.min(capacity, tonumber(state[1]) + elapsed * tonumber(run.rps))
    end
    if tokens < 1 then
      -- Nothing to write: below the burst the refill is linear, so the bucket as kept gives
      -- the same tokens later.
      local rps, wait = tonumber(run.rps), nil
      -- The slack is the Python stores' TOKEN_WAIT_SLACK: a claim that late finds the token.
      if rps > 0 then wait = (1 - tokens) / rps + 1e-6 end
      return 'Rate ' .. run.rkey .. ': no token', wait
    end
    redis.call('HSET', tk, 'tokens', tokens - 1, 'updated', NOW)
    -- The workflow's Rate keys with a bucket, for the console's rate_usage (i_rates.lua).
    redis.call('SADD', K('toks', run.name), run.rkey)
  end
  return nil
end

local function claim(run, lease)
  dequeue(run)
  if run.lock ~= lease or not held(run) then
    set(run, 'epoch', tonumber(run.epoch or '0') + 1)
  end
  set_lock(run, lease)
  set(run, 'lock_expires', NOW + LOCK_TTL)
  redis.call('ZADD', K('locks', run.name), NOW + LOCK_TTL, run.id)
end

-- -- insight ---------------------------------------------------------------------------------

-- The runs queued in each fairness bucket of ``name`` in this shard: {bucket, count, ...}.
local function queued_per_bucket(name)
  local queued = {}
  for _, bucket in ipairs(redis.call('SMEMBERS', K('qb', name))) do
    queued[#queued + 1] = bucket
    queued[#queued + 1] = redis.call('ZCARD', K('q', name, bucket))
  end
  return queued
end

-- -- controls ------------------------------------------------------------------------------------

local function latch_cancel(run, at, detail_json)
  set(run, 'cancel_at', at)
  set(run, 'cancel_detail', detail_json)
  local err = append(run, {{'run:cancel', '{"requested_at":' .. cjson.encode(at) .. ',"detail":' .. detail_json .. '}', '1', '{}'}}, nil)
  if err then return err end
  if has(run.wait) and not held(run) then enqueue(run) end
  return nil
end

local function latch_pause(run, at)
  set(run, 'pause_at', at)
  return append(run, {event('run:pause_requested', {requested_at = at})}, nil)
end

-- A control sent namespace-wide (route = 'route') for an id no shard held when it was sent:
-- {'routed', shard} once the id is routed to a shard (the control goes there), else nil.
local function routed_elsewhere(route, name, id)
  if route ~= 'route' then return nil end
  local shard = redis.call('HGET', K('shardof'), name .. SEP .. id)
  if shard then return {'routed', shard} end
  return nil
end

-- Whether a held control's expires_at (false when its held hash has none) is still ahead.
local function held_live(expires_at) return expires_at and tonumber(expires_at) > NOW end

-- Controls held for an id not submitted yet: ``fields`` (field, value, ...) set in its held
-- hash ``hkey`` with a new expires_at. The key's TTL is relative to the server's clock, which
-- NOW may not be: it is only a backstop, expires_at is what counts.
local function hold_controls(hkey, fields)
  fields[#fields + 1] = 'expires_at'
  fields[#fields + 1] = NOW + HELD_TTL
  redis.call('HSET', hkey, unpack(fields))
  redis.call('EXPIRE', hkey, math.ceil(HELD_TTL) + 60)
end

-- -- requeue budgets -----------------------------------------------------------------------------

local function requeue(run, reason, extra)
  set_lock(run, nil)
  if ended(run) then return nil end
  local owner_gone = tonumber(run.owner_gone or '0')
  local store_requeues = tonumber(run.store_requeues or '0')
  local count, over, code
  if reason == 'store_unavailable' then
    store_requeues = store_requeues + 1
    count, over, code = store_requeues, store_requeues > MAX_STORE_REQUEUES, reason
  else
    owner_gone = owner_gone + 1
    count, over, code = owner_gone, owner_gone > MAX_RETRIES, 'max_retries'
  end
  set(run, 'owner_gone', owner_gone)
  set(run, 'store_requeues', store_requeues)
  if over then
    return append(run, {event('run:error', {
      code = code,
      message = 'run requeued too often (' .. reason .. ')',
      error = {type = 'lockgate:requeue_budget', message = reason, code = code},
    })}, nil)
  end
  local requeued = {reason = reason, count = count}
  for k, v in pairs(extra or {}) do requeued[k] = v end
  local err = append(run, {event('run:requeued', requeued)}, nil)
  if err then return err end
  enqueue(run)
  return nil
end

-- -- poison runs (stores/_poison.py: the same rule) ----------------------------------------------

-- Requeue, or quarantine, a run whose holder's lease lapsed. With no policy (pmax '') nothing is
-- counted. Else the lapse is a crash at NOW (unless it is loop-blocked, the lease's loop noted
-- blocked with no heartbeat since, and pcounts is '0'); crashes older than pttl seconds are
-- forgotten; the one past pmax ends the run with run:error code quarantined.
local function lapse(run, pmax, pttl, pcounts)
  if ended(run) then
    set_lock(run, nil)
    return nil
  end
  local blocked = locked(run) and has(run.blocked_lease) and run.blocked_lease == run.lock
    and tostring(run.blocked_until) == tostring(run.lock_expires)
  local crashes = {}
  if has(run.crashes) then crashes = cjson.decode(run.crashes) end
  set(run, 'blocked_lease', '')
  set(run, 'blocked_until', '')
  local extra = {}
  if blocked then extra.loop_blocked = true end
  if has(pmax) then
    local ttl, kept = tonumber(pttl), {}
    for _, at in ipairs(crashes) do
      if at > NOW - ttl then table.insert(kept, at) end
    end
    crashes = kept
    if pcounts == '1' or not blocked then
      table.insert(crashes, NOW)
      if #crashes > tonumber(pmax) then
        set(run, 'crashes', cjson.encode(crashes))
        set_lock(run, nil)
        local message = 'quarantined: the run took its worker down ' .. #crashes ..
          ' times within ' .. string.format('%g', ttl) .. 's (poison_max_retries=' .. pmax .. ')'
        return append(run, {event('run:error', {
          code = 'quarantined',
          message = message,
          error = {type = 'lockgate:quarantined', message = message, code = 'quarantined'},
          detail = {
            crashes = #crashes, first_crash_at = crashes[1], last_crash_at = crashes[#crashes],
            window_s = ttl, max_retries = tonumber(pmax), loop_blocked = blocked,
          },
        })}, nil)
      end
      extra = {crash_at = NOW, crashes = #crashes, loop_blocked = extra.loop_blocked}
    end
  end
  if #crashes > 0 then set(run, 'crashes', cjson.encode(crashes)) else set(run, 'crashes', '') end
  return requeue(run, 'owner_gone', extra)
end

-- -- idempotency keys -----------------------------------------------------------------------

-- The run a live record of idempotency key ikey names (a repeat), an error reply when the
-- request's body_hash differs from the first one's, or nil when the key is free.
local function idempotent_repeat(ikey, name, key, body_hash)
  local rec = redis.call('HMGET', ikey, 'run_id', 'body_hash', 'expires_at')
  if not (rec[1] and tonumber(rec[3]) > NOW) then return nil end
  if has(body_hash) and has(rec[2]) and rec[2] ~= body_hash then
    return fail('IDEMPOTENCY', 'idempotency key ' .. key .. ' of ' .. name ..
      ' was first used for a different request (run ' .. rec[1] .. '); that run is unchanged')
  end
  return rec[1]
end

local function keep_idempotency(ikey, id, body_hash, seconds)
  redis.call('HSET', ikey, 'run_id', id, 'body_hash', body_hash, 'expires_at', NOW + seconds)
  redis.call('EXPIRE', ikey, math.ceil(seconds) + 60)  -- a backstop; the clock judges
end

-- -- creating a run ------------------------------------------------------------------------------

-- The controls held for an id not submitted yet, taken out of this shard: those held here, else
-- those routed (the ones held namespace-wide, read when the id was routed to this shard).
local function take_held(name, id, routed)
  local hkey = K('held', name, id)
  local h = redis.call('HMGET', hkey, 'cancel_at', 'cancel_detail', 'pause_at', 'expires_at')
  redis.call('DEL', hkey)
  local held = routed or {}
  if h[4] and tonumber(h[4]) > NOW then
    held = {cancel_at = h[1] or held.cancel_at, cancel_detail = h[2] or held.cancel_detail,
            pause_at = h[3] or held.pause_at}
  end
  return held
end

-- fields: the run hash's fields as a flat list; opening: the opening events; wait_json/due: the
-- delayed start's wait, or ''; routed: controls held namespace-wide for the id (or nil).
local function insert_run(name, id, fields, opening, wait_json, due, routed)
  local key = run_key(name, id)
  if redis.call('EXISTS', key) == 1 then return fail('DUPLICATE', name .. SEP .. id) end
  local order = redis.call('INCR', K('ord', name))
  redis.call('HSET', key, 'ord', order, 'submitted_at', NOW, 'last_seq', 0, 'epoch', 0, unpack(fields))
  redis.call('ZADD', K('runs', name), order, id)
  local run = load(name, id)
  local err = append(run, opening, nil)
  if err then return err end
  if has(wait_json) then open_wait(run, wait_json, due) else enqueue(run) end
  local held = take_held(name, id, routed)
  if has(held.pause_at) then
    err = latch_pause(run, held.pause_at)
    if err then return err end
  end
  if has(held.cancel_at) then
    err = latch_cancel(run, held.cancel_at, has(held.cancel_detail) and held.cancel_detail or '{}')
    if err then return err end
  end
  return run
end

-- -- handing a run on ------------------------------------------------------------------------------

-- The fields of a stream entry as a table.
local function entry_fields(entry)
  local fields = {}
  for i = 1, #entry[2], 2 do fields[entry[2][i]] = entry[2][i + 1] end
  return fields
end

-- Whether run was handed on to successor_id: as its hash says (continued_to, set with the
-- run:continued, so a journal kept elsewhere need not be read), else as its last event says.
local function handed_on_to(run, successor_id)
  if has(run.continued_to) then return run.continued_to == successor_id end
  local last = redis.call('XREVRANGE', events_key(run.name, run.id), '+', '-', 'COUNT', 1)[1]
  if not last then return false end
  local fields = entry_fields(last)
  return fields.k == 'run:continued' and cjson.decode(fields.p).run_id == successor_id
end

-- The detail (JSON) of run's latest run:cancel, as latched: kept on the run by latch_cancel,
-- else cut out of the payload it journaled, so its numbers are kept exactly; re-encoded only for
-- a payload of another shape.
local function cancel_detail(run)
  if has(run.cancel_detail) then return run.cancel_detail end
  local top = '+'
  while true do
    local page = redis.call('XREVRANGE', events_key(run.name, run.id), top, '-', 'COUNT', 100)
    for _, entry in ipairs(page) do
      local fields = entry_fields(entry)
      if fields.k == 'run:cancel' then
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
