-- force_state: an operator override (forced_open, disabled) or its release (closed).
-- ARGV[3] is the target; RedisStore has already checked that it is one of those three.
-- ARGV[4], when present and not empty, is the operator action stored as last_action.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local target = ARGV[3]
local key = KEYS[1]
if target ~= 'closed' and target ~= 'forced_open' and target ~= 'disabled' then
  return redis.error_reply('cannot force a breaker to ' .. target)
end
local rec, _, old = read(key, now) -- a corrupt record is replaced like an absent one
local before = 'closed'
local gen = 1
if rec ~= nil then
  before = rec.state
  gen = rec.gen + 1
end
local forced = blank(target, gen, rec)
-- An operator's tool may not know the fleet's window: the record keeps the one it had.
if rec ~= nil then forced.window_ms = rec.window_ms end
-- As rules.apply_force: a reset that ends an outage keeps when it began and is a recovery
-- (closed_at starts the ramp); a reset of a closed or disabled breaker is not one.
if target == 'closed' and rec ~= nil
    and (before == 'open' or before == 'half_open' or before == 'forced_open') then
  if rec.opened_at > 0 then forced.opened_at = rec.opened_at
  elseif rec.updated_at > 0 then forced.opened_at = rec.updated_at
  else forced.opened_at = now end
  forced.closed_at = now
end
if ARGV[4] ~= nil and ARGV[4] ~= '' then forced.last_action = ARGV[4] end
return reply(save(key, forced, policy, now, old, true), now, true, before, target)
