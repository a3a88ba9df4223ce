-- force_state: an operator override (forced_open, disabled) or its release (closed).
-- ARGV[12] is the target; RedisStore has already checked that it is one of those three.
-- ARGV[13], when present and not empty, is the operator action stored as last_action.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local target = ARGV[12]
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
local forced = blank(target, gen)
if ARGV[13] ~= nil and ARGV[13] ~= '' then forced.last_action = ARGV[13] end
return reply(save(key, forced, policy, now, old), now, true, before, target)
