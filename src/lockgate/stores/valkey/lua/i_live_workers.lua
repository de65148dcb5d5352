-- The records of the workers that have not lapsed, by worker id.
-- (No arguments.)
-- Returns {record, ...}.
local live = redis.call('ZRANGEBYSCORE', K('wkx'), '(' .. NOW, '+inf')
if #live == 0 then return {} end
table.sort(live)
local records = redis.call('HMGET', K('wk'), unpack(live))
local found = {}
for _, record in ipairs(records) do
  if record then found[#found + 1] = record end
end
return found
