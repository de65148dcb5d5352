-- One page of a run's journal, oldest first: the entries after run_seq A(3), at most A(4) of
-- them and, past the first, no more than A(5) bytes of fields in all (fit_page), so no one
-- reply is too big however large the events. A(1) name  A(2) run id
local entries = redis.call('XRANGE', events_key(A(1), A(2)), '(0-' .. A(3), '+', 'COUNT', tonumber(A(4)))
return fit_page(entries, tonumber(A(5)))
