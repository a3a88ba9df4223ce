-- census: count one census write in the record's census ring (rules.apply_census), in any
-- state: never a transition, never a count the rules judge. An absent record becomes a fresh
-- closed one that carries it.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local key = KEYS[1]
local rec, _, old = read(key, now)
local counted = copy(rec or blank('closed', 0))
local idx = math.floor(now / policy.bucket_ms)
local slot = idx % WINDOW_BUCKETS
local held = counted.census[slot]
if held ~= nil and held.idx == idx then
  counted.census[slot] = {idx = idx, count = held.count + 1}
else
  counted.census[slot] = {idx = idx, count = 1}
end
return reply(save(key, counted, policy, now, old), now, true)
