-- Move a continue_as_new chain's tail record (namespace-wide, keyed by the chain's root)
-- forward to a link, never back. A(1) root name  A(2) root run id  A(3) the link's hop
-- A(4) the link (JSON)  A(5) '1' to record it as the chain's final link, '' not
-- Returns 'moved', or 'kept' when a later hop (or this one, already final) is recorded.
local key = K('chain', A(1), A(2))
local hop, close = tonumber(A(3)), A(5) == '1'
local recorded = redis.call('HMGET', key, 'hop', 'closed')
if recorded[1] then
  local at = tonumber(recorded[1])
  if at > hop then return 'kept' end
  if at == hop then
    if close and recorded[2] ~= '1' then
      redis.call('HSET', key, 'closed', '1')
      return 'moved'
    end
    return 'kept'
  end
end
redis.call('HSET', key, 'hop', A(3), 'link', A(4), 'closed', close and '1' or '0')
return 'moved'
