-- Drop expired records: hashes with an expires_at (idempotency records, held controls).
-- A(1) the time to judge by, or '' for now  A(2...) the records' keys, without the prefix
-- Returns how many went.
local cutoff = has(A(1)) and tonumber(A(1)) or NOW
local removed = 0
local i = 2
while A(i) do
  local key = P .. A(i)
  if redis.call('TYPE', key).ok == 'hash' then
    local expires_at = redis.call('HGET', key, 'expires_at')
    if expires_at and tonumber(expires_at) <= cutoff then
      redis.call('DEL', key)
      removed = removed + 1
    end
  end
  i = i + 1
end
return removed
