-- Claim the next queued runs of a workflow that their gates allow, fairly across buckets: one
-- per lease, each chosen as if claimed alone, until the leases or the claimable runs run out.
-- A(1) name  A(2) leases, joined by SEP  A(3) worker version or ''
-- A(4) how many runs of a bucket to look past
-- A(5) 'load' to answer each claim as {id, journal (XRANGE), cancel_at, pause_at, pending
-- updates, where its journal starts in an event log ('' when not kept)} instead of its id; the journal is false when it holds more than A(6) events or
-- A(7) bytes (a journal page's bounds: the caller then reads it page by page).
-- Answers {the list of claims, in the leases' order; and when the claims ran out because a
-- Rate refused a bucket, the seconds until the first such token (a string, '' if none)}.
local name, wversion, scan = A(1), A(3), tonumber(A(4))
local page_size, page_bytes = tonumber(A(6)), tonumber(A(7))

-- The whole journal, or false when it is more than one page.
local function journal(id)
  local entries = redis.call('XRANGE', events_key(name, id), '-', '+', 'COUNT', page_size + 1)
  if #entries > page_size or #fit_page(entries, page_bytes) < #entries then return false end
  return entries
end
local served = K('served', name)
-- The soonest token of a bucket a Rate refused, in the last claim_next (the one that found
-- nothing: it tried every bucket).
local token_in

local function claim_next(lease)
  token_in = nil
  local buckets = redis.call('SMEMBERS', K('qb', name))
  if #buckets == 0 then return nil end
  local order = {}
  for _, b in ipairs(buckets) do
    local head = redis.call('ZRANGE', K('q', name, b), 0, 0, 'WITHSCORES')
    if #head > 0 then
      local s = tonumber(redis.call('HGET', served, b) or '0')
      table.insert(order, {s, tonumber(head[2]), b})
    end
  end
  table.sort(order, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end)
  for _, entry in ipairs(order) do
    local bucket = entry[3]
    for _, id in ipairs(redis.call('ZRANGE', K('q', name, bucket), 0, scan - 1)) do
      local run = load(name, id)
      local mine = run.lock == lease and held(run)
      local skip = (held(run) and run.lock ~= lease)
        or (has(wversion) and run.version_behavior == 'pinned' and has(run.version)
            and run.version ~= wversion)
      if not skip then
        if not mine then
          local refused, wait = gated(run)
          if refused then
            if wait and (not token_in or wait < token_in) then token_in = wait end
            break
          end
        end
        claim(run, lease)
        redis.call('HSET', served, bucket, redis.call('INCR', K('serveseq', name)))
        if A(5) ~= 'load' then return id end
        return {
          id,
          journal(id),
          run.cancel_at or '',
          run.pause_at or '',
          redis.call('HLEN', K('upd', name, id)),
          run.journal_at or '',
        }
      end
    end
  end
  return nil
end

local claimed = {}
for lease in string.gmatch(A(2), '[^' .. SEP .. ']+') do
  local answer = claim_next(lease)
  if not answer then break end
  table.insert(claimed, answer)
end
return {claimed, token_in and string.format('%.17g', token_in) or ''}
