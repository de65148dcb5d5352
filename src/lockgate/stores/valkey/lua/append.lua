-- Append events, fenced by a lease when one is named. A(1) name  A(2) run id  A(3) events (JSON)
-- A(4) fence lease or ''  A(5) 'poll' to answer the run's controls too
-- Answers {the run's last run_seq after the append, the epoch stamped on its events ('' when
-- unfenced)}, followed with 'poll' by {cancel_at, pause_at, pending updates}.
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
local events = cjson.decode(A(3))
local epoch = nil
local function answer()
  local written = {tonumber(run.last_seq or '0'), epoch and tostring(epoch) or ''}
  if A(5) ~= 'poll' then return written end
  return {written[1], written[2], run.cancel_at or '', run.pause_at or '',
    redis.call('HLEN', K('upd', A(1), A(2)))}
end
if #events == 0 then return answer() end
if has(A(4)) then
  local err = check_fence(run, A(4))
  if err then return err end
  epoch = run.epoch
end
local err = append(run, events, epoch)
if err then return err end
return answer()
