-- The open trigger buffers of a workflow in this shard, the soonest due first: those in its
-- due index (tdue), each with its first event's time and its events.
-- A(1) name  A(2) at most this many
-- Returns {key, first_at or '', due_at, events, ...}.
local name = A(1)
local found = {}
local due = redis.call('ZRANGE', K('tdue', name), 0, tonumber(A(2)) - 1, 'WITHSCORES')
for i = 1, #due, 2 do
  local key = due[i]
  found[#found + 1] = key
  found[#found + 1] = redis.call('HGET', K('tb', name, key), 'first_at') or ''
  found[#found + 1] = due[i + 1]
  found[#found + 1] = redis.call('LLEN', K('tev', name, key))
end
return found
