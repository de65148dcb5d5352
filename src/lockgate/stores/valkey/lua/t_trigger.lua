-- A Collect or Debounce buffer: buffer an event and set when the buffer is due; then fire the
-- buffer if that event completes a Collect batch, or if it is due by a given time. A fire takes
-- the whole batch and submits its run in this same step, so every event lands in one run.
-- A(1) name  A(2) key  A(3) the event (JSON), or '' to only fire
-- A(4) fire if due by this time, or ''
-- A(5) mode: 'collect' or 'debounce'  A(6) window (s)  A(7) max events or ''  A(8) max wait (s) or ''
-- A(9) the fired run's hash fields (JSON flat list)  A(10) its params (template)
-- A(11) its run:init as [kind, payload template, schema version, headers (JSON)]
-- A template is a JSON list alternating literal JSON text and the name of a slot to fill:
-- events, count, first, last, now, and (in run:init) params.
local name, key = A(1), A(2)
local bkey, ekey, dkey = K('tb', name, key), K('tev', name, key), K('tdue', name)

-- -- SHA-256 (Lua has only sha1hex), so a batch's run id is the one every store derives -----

local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local ror, rshift, lshift, tobit = bit.ror, bit.rshift, bit.lshift, bit.tobit
local ROUND = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

-- msg padded to whole 64-byte blocks, ending in its length in bits.
local function padded(msg)
  local bits, tail = #msg * 8, ''
  for i = 7, 0, -1 do tail = tail .. string.char(math.floor(bits / 2 ^ (8 * i)) % 256) end
  return msg .. '\128' .. string.rep('\0', (55 - #msg) % 64) .. tail
end

-- Fold one 64-byte block starting at msg[at] into the state h.
local function compress(h, msg, at)
  local w = {}
  for i = 0, 15 do
    local b1, b2, b3, b4 = string.byte(msg, at + 4 * i, at + 4 * i + 3)
    w[i] = bor(lshift(b1, 24), lshift(b2, 16), lshift(b3, 8), b4)
  end
  for i = 16, 63 do
    local s0 = bxor(ror(w[i - 15], 7), ror(w[i - 15], 18), rshift(w[i - 15], 3))
    local s1 = bxor(ror(w[i - 2], 17), ror(w[i - 2], 19), rshift(w[i - 2], 10))
    w[i] = tobit(w[i - 16] + s0 + w[i - 7] + s1)
  end
  local a, b, c, d, e, f, g, k = h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]
  for i = 0, 63 do
    local t1 = k + bxor(ror(e, 6), ror(e, 11), ror(e, 25)) + bxor(band(e, f), band(bnot(e), g))
      + ROUND[i + 1] + w[i]
    local t2 = bxor(ror(a, 2), ror(a, 13), ror(a, 22)) + bxor(band(a, b), band(a, c), band(b, c))
    k, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + t2)
  end
  for i, v in ipairs({a, b, c, d, e, f, g, k}) do h[i] = tobit(h[i] + v) end
end

local function sha256hex(msg)
  local h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}
  msg = padded(msg)
  for at = 1, #msg, 64 do compress(h, msg, at) end
  local hex = {}
  for i = 1, 8 do hex[i] = bit.tohex(h[i], 8) end
  return table.concat(hex)
end

-- When the buffer is due after an event now: TriggerPolicy.due_at.
local function due_at(first_at, current)
  if A(5) == 'collect' then return current or first_at + tonumber(A(6)) end
  local due = NOW + tonumber(A(6))
  if has(A(8)) then due = math.min(due, first_at + tonumber(A(8))) end
  return due
end

-- Buffer event; whether it completes a Collect batch (TriggerPolicy.full).
local function buffer(event)
  local b = redis.call('HMGET', bkey, 'first_at', 'due_at', 'next_seq')
  local first_at = b[1] and tonumber(b[1]) or NOW
  local due = due_at(first_at, b[2] and tonumber(b[2]) or nil)
  redis.call('RPUSH', ekey, event)
  redis.call('HSET', bkey, 'first_at', first_at, 'due_at', due, 'next_seq', tonumber(b[3] or '1') + 1)
  redis.call('ZADD', dkey, due, key)
  return A(5) == 'collect' and has(A(7)) and redis.call('LLEN', ekey) >= tonumber(A(7))
end

local function fill(template, values)
  local out = {}
  for i, part in ipairs(template) do
    if i % 2 == 1 then out[i] = part else out[i] = values[part] end
  end
  return table.concat(out)
end

-- Take the batch and submit its run; its id, or false for an empty buffer. The run's id names
-- the key and the sequence numbers of the events it covers, so it names one batch only. The
-- buffer keeps next_seq for good, so no later batch reuses those numbers.
local function fire()
  local events = redis.call('LRANGE', ekey, 0, -1)
  if #events == 0 then return false end
  local last = tonumber(redis.call('HGET', bkey, 'next_seq')) - 1
  local first = last - #events + 1
  local values = {
    events = '[' .. table.concat(events, ',') .. ']',
    count = string.format('%d', #events),
    first = string.format('%d', first),
    last = string.format('%d', last),
    now = ARGV[2] ~= '' and ARGV[2] or string.format('%.6f', NOW),
  }
  values.params = fill(cjson.decode(A(10)), values)
  local fields = cjson.decode(A(9))
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'params' then fields[i + 1] = values.params end
  end
  local init = cjson.decode(A(11))
  local id = 'trg-' .. string.sub(sha256hex(name .. SEP .. key .. SEP .. values.first .. SEP .. values.last), 1, 32)
  local run = insert_run(name, id, fields, {{init[1], fill(init[2], values), init[3], init[4]}}, '', '')
  if run.err then return run end
  redis.call('DEL', ekey)
  redis.call('HDEL', bkey, 'first_at', 'due_at')
  redis.call('ZREM', dkey, key)
  return id
end

if has(A(3)) and buffer(A(3)) then return fire() end
if has(A(4)) then
  local due = redis.call('HGET', bkey, 'due_at')
  if due and tonumber(due) <= tonumber(A(4)) then return fire() end
end
return false
