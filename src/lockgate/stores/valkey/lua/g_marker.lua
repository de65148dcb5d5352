-- Write the namespace's marker unless it has one, in the namespace-wide slot. The marker is
-- the hash `marker`: what a worker checks is still there, so that it can tell a namespace
-- that lost its data (a server restarted without persistence, a FLUSHALL) from one that is
-- merely idle. Only `lockgate store init`, a worker's start and a rebuild write it.
-- A(1) a fresh marker id  A(2) the store's key layout generation  A(3) its shard count
-- Returns 1 when this call wrote it, 0 when it was there.
if redis.call('EXISTS', K('marker')) == 1 then return 0 end
redis.call('HSET', K('marker'), 'id', A(1), 'created_at', tostring(NOW), 'layout', A(2),
  'shard_count', A(3))
return 1
