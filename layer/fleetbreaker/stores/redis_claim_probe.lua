-- claim_probe: the open -> half_open move, or a free half-open slot. ARGV[3] is the nonce.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local nonce = ARGV[3]
local key = KEYS[1]
local rec, _, old = read(key, now)
if rec == nil then return reply(nil, now, false) end

local until_ms = now + policy.lease_ms
if rec.state == 'open' and now >= rec.open_until then
  local token = '0-' .. nonce
  local probing = copy(rec)
  probing.state = 'half_open'
  probing.gen = rec.gen + 1
  probing.successes = 0
  probing.leases = {[0] = {token = token, until_ms = until_ms, since_ms = now}}
  return reply(save(key, probing, policy, now, old), now, true, 'open', 'half_open', token)
end
if rec.state == 'half_open' then
  local slot = free_slot(rec, policy, now)
  if slot == nil then return reply(rec, now, false) end
  local token = int(slot) .. '-' .. nonce
  local leased = copy(rec)
  leased.leases[slot] = {token = token, until_ms = until_ms, since_ms = now}
  return reply(save(key, leased, policy, now, old), now, true, nil, nil, token)
end
return reply(rec, now, false)
