-- End a run unless something waits for its attempt first. A(1) name  A(2) run id
-- A(3) events (JSON; the last one terminal)  A(4) fence lease
-- With no cancel latched and no update pending, append every event (the run ends); otherwise
-- append all but the terminal. Answers {the run's last run_seq after it, the epoch stamped on
-- the events, 'ENDED'} or {last run_seq, epoch, cancel_at, pause_at, updates}.
local run = load(A(1), A(2))
if not run then return fail('NOT_FOUND', A(1) .. SEP .. A(2)) end
local err = check_fence(run, A(4))
if err then return err end
local events = cjson.decode(A(3))
local updates = redis.call('HLEN', K('upd', A(1), A(2)))
if not has(run.cancel_at) and updates == 0 then
  err = append(run, events, run.epoch)
  if err then return err end
  return {tonumber(run.last_seq), tostring(run.epoch), 'ENDED'}
end
table.remove(events)
if #events > 0 then
  err = append(run, events, run.epoch)
  if err then return err end
end
return {tonumber(run.last_seq or '0'), tostring(run.epoch), run.cancel_at or '', run.pause_at or '',
  updates}
