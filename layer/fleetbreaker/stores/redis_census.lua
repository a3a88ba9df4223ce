-- census: count one census write in the record's census ring (rules.apply_census), in any
-- state: never a transition, never a count the rules judge. An absent record becomes a fresh
-- closed one that carries it. A key it cannot read answers "corrupt" and is left as it is:
-- it may hold an open breaker, which only a counted write or an operator may replace.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local key = KEYS[1]
local rec, corrupt, old = read(key, now)
if corrupt ~= nil then return {'corrupt', corrupt, '', '', '', int(now)} end
local counted = copy(rec or blank('closed', 0))
local idx = math.floor(now / policy.bucket_ms)
local slot = idx % WINDOW_BUCKETS
local held = counted.census[slot]
-- record.MAX_CENSUS_COUNT: a full slice stays full (a digit more and no store reads it).
local most = 10 ^ __MAX_RECORD_DIGITS__ - 1
if held ~= nil and held.idx == idx then
  counted.census[slot] = {idx = idx, count = math.min(held.count + 1, most)}
else
  counted.census[slot] = {idx = idx, count = 1}
end
return reply(save(key, counted, policy, now, old), now, true)
