-- Check a namespace as a store connects to it, in the namespace-wide slot: in a namespace
-- nothing wrote yet, record the store's key layout generation and shard count; else answer
-- the ones recorded. A namespace with keys but no layout was written by a lockgate of layout
-- '1', which recorded its shard count (shards) and counted its queue (qseq) but no layout;
-- unless A(3) says the caller found its keys are of this layout (a namespace that lost its
-- data, layout key and all, then written again by stores connected before the loss).
-- A(1) the store's key layout generation  A(2) the shard count to record in a namespace that
-- has none (the store's, or the default when the store was given none: it then takes the
-- count answered)  A(3) '1': record the layout
-- Returns {layout, shard count recorded}.
local layout = redis.call('GET', K('layout'))
if not layout then
  if redis.call('EXISTS', K('shards'), K('qseq')) > 0 and A(3) ~= '1' then
    layout = '1'
  else
    layout = A(1)
    redis.call('SET', K('layout'), layout)
  end
end
if layout == A(1) then redis.call('SET', K('shards'), A(2), 'NX') end
return {layout, redis.call('GET', K('shards')) or ''}
