-- Raise a key's fired-through mark in a trigger topic's partition to a restored run's last
-- offset (lockgate store rebuild): a mark only grows.
-- A(1) name  A(2) the mark's field (source SEP key)  A(3) the run's last offset
-- Answers 1 when the mark moved, else 0.
local mkey = K('tfired', A(1))
local mark = redis.call('HGET', mkey, A(2))
if mark and tonumber(mark) >= tonumber(A(3)) then return 0 end
redis.call('HSET', mkey, A(2), A(3))
return 1
