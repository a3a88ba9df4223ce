-- tune: store live settings (ARGV[3], JSON text; "" clears them) with the record, and the
-- operator action (ARGV[4], "" for none) as last_action. The state is left as it is; a
-- breaker without a live record gets a fresh closed one to carry the settings. With ARGV[5],
-- only if the stored settings are still that text ("" for none): the caller merged into them;
-- otherwise nothing is written and the record is returned as it is.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)
local key = KEYS[1]
local rec, _, old = read(key, now)
if ARGV[5] ~= nil and ((rec and rec.tuned) or '') ~= ARGV[5] then
  return reply(rec, now, false)
end
if rec == nil then rec = blank('closed', 0) end
rec.tuned = ARGV[3]
if ARGV[4] ~= '' then rec.last_action = ARGV[4] end
return reply(save(key, rec, policy, now, old, true), now, true)
