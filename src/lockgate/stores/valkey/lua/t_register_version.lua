-- The rank of a workflow's version: ranks count from 1 in order of first sight.
-- A(1) name  A(2) version
local vkey = K('ver', A(1))
local rank = redis.call('HGET', vkey, A(2))
if rank then return tonumber(rank) end
rank = redis.call('HLEN', vkey) + 1
redis.call('HSET', vkey, A(2), rank)
return rank
