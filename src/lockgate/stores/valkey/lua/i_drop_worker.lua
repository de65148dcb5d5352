-- Drop a worker's record (a clean stop): it lapses now rather than being forgotten, so a
-- lease it left behind is taken over at once (see i_lapsed_workers).
-- A(1) worker id
redis.call('HDEL', K('wk'), A(1))
local lapses = redis.call('ZSCORE', K('wkx'), A(1))
if lapses and tonumber(lapses) > NOW then redis.call('ZADD', K('wkx'), NOW, A(1)) end
return true
