-- record_failure: count a failure (ARGV[3] failures: its weight, rules.apply_failure) in the
-- current window; trip (once) at the threshold.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
-- Absent (a caller from before weights) counts one; RedisStore sends only whole numbers >= 1.
local weight = math.max(1, math.floor(tonumber(ARGV[3]) or 1))
local key = KEYS[1]
-- Absent, expired or corrupt: counted as a fresh closed record (and a corrupt one replaced).
local rec, _, old = read(key, now)
local current = rec or blank('closed', 0)
if current.state ~= 'closed' then return reply(rec, now, false) end

local counted = copy(current)
if current.window_start ~= 0 and now - current.window_start < policy.window_ms then
  counted.failures = current.failures + weight
else
  counted.failures = weight
  counted.window_start = now
end
if counted.failures < policy.failure_threshold then
  return reply(save(key, counted, policy, now, old), now, true)
end
return reply(save(key, trip(current, policy, now, counted.failures), policy, now, old), now, true, 'closed', 'open')
