-- record_failure: count one failure in the current window; trip (once) at the threshold.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local key = KEYS[1]
-- Absent, expired or corrupt: counted as a fresh closed record (and a corrupt one replaced).
local rec, _, old = read(key, now)
local current = rec or blank('closed', 0)
if current.state ~= 'closed' then return reply(rec, now, false) end

local counted = copy(current)
if current.window_start ~= 0 and now - current.window_start < policy.window_ms then
  counted.failures = current.failures + 1
else
  counted.failures = 1
  counted.window_start = now
end
if counted.failures < policy.failure_threshold then
  return reply(save(key, counted, policy, now, old), now, true)
end
return reply(save(key, trip(current, policy, now), policy, now, old), now, true, 'closed', 'open')
