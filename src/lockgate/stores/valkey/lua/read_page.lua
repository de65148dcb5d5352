-- One page of a run's journal, oldest first: the entries after run_seq A(3), at most A(4) of
-- them and, past the first, no more than A(5) bytes of fields in all (fit_page), so no one
-- reply is too big however large the events. A(1) name  A(2) run id
-- Answers {entries, more}: more is 1 when entries after these may follow, else 0.
local count = tonumber(A(4))
local entries = redis.call('XRANGE', events_key(A(1), A(2)), '(0-' .. A(3), '+', 'COUNT', count)
local page = fit_page(entries, tonumber(A(5)))
local more = 0
if #page < #entries or #entries == count then more = 1 end
return {page, more}
