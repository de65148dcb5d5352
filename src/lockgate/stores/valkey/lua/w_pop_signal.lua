-- Remove the buffered signal signal_id of that name. A(1) name  A(2) run id  A(3) signal name
-- A(4) signal id. Returns 1, or 0 when it is no longer there.
if redis.call('EXISTS', run_key(A(1), A(2))) == 0 then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
local key = K('sig', A(1), A(2))
local head = A(3) .. SEP .. A(4) .. SEP
for _, entry in ipairs(redis.call('LRANGE', key, 0, -1)) do
  if string.sub(entry, 1, #head) == head then
    return redis.call('LREM', key, 1, entry)
  end
end
return 0
