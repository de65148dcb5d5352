-- Keep where a run's journal starts in its event log (a Kafka partition and offset): the
-- lowest offset told stays. A(1) name  A(2) run id  A(3) partition  A(4) offset.
-- Returns the position kept, 'partition:offset'; '' when no such run (nothing is written).
local run = load(A(1), A(2))
if not run then return '' end
local kept = run.journal_at
if kept then
  local offset = tonumber(string.match(kept, ':(%d+)$'))
  if offset and offset <= tonumber(A(4)) then return kept end
end
set(run, 'journal_at', A(3) .. ':' .. A(4))
return run.journal_at
