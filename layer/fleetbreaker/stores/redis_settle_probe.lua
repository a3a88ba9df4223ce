-- settle_probe: a probe's result. Only a live lease counts: a late prober changes nothing.
-- ARGV[3] is the token, ARGV[4] "1" for success ("r": released, no verdict), ARGV[5] the
-- jitter factor.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local token = ARGV[3]
local success = ARGV[4] == '1'
local jitter = tonumber(ARGV[5])
local key = KEYS[1]
local rec, _, old = read(key, now)
if not holds_lease(rec, token, now) then return reply(rec, now, false) end

local slot = lease_slot(token)
if ARGV[4] == 'r' then
  -- As rules.apply_settle: a cancelled probe gives its lease back; nothing is counted.
  local kept = copy(rec)
  kept.leases[slot] = nil
  return reply(save(key, kept, policy, now, old), now, true)
end
if success then
  local successes = rec.successes + 1
  if successes < policy.successes_needed then
    local kept = copy(rec)
    kept.successes = successes
    kept.leases[slot] = nil
    return reply(save(key, kept, policy, now, old), now, true)
  end
  local closed = blank('closed', rec.gen + 1, rec)
  -- As rules.apply_settle: a recovery; closed_at starts the recovery ramp.
  closed.opened_at = rec.opened_at > 0 and rec.opened_at or now
  closed.closed_at = now
  return reply(save(key, closed, policy, now, old), now, true, 'half_open', 'closed')
end
local reopened = reopen(rec, policy, now, jitter)
return reply(save(key, reopened, policy, now, old), now, true, 'half_open', 'open')
