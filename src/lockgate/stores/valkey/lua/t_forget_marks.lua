-- Drop a trigger topic partition's fired-through marks below a position (Store.forget_marks),
-- a page of the workflow's marks hash at a time.
-- A(1) name  A(2) the marks' field prefix (source SEP)  A(3) below  A(4) the HSCAN cursor
-- Answers {next cursor ('0' when done), how many went}.
local mkey = K('tfired', A(1))
local pattern = string.gsub(A(2), '([%*%?%[%]\\])', '\\%1') .. '*'  -- the prefix, literally
local page = redis.call('HSCAN', mkey, A(4), 'MATCH', pattern, 'COUNT', 500)
local below, gone = tonumber(A(3)), 0
local fields = page[2]
for i = 1, #fields, 2 do
  if tonumber(fields[i + 1]) < below then
    redis.call('HDEL', mkey, fields[i])
    gone = gone + 1
  end
end
return {page[1], gone}
