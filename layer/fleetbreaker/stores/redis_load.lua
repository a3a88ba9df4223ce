-- load: the live record, nothing written. A key this package cannot read answers "corrupt".
local now = clock(ARGV[1])
local rec, corrupt = read(KEYS[1], now)
if corrupt ~= nil then return {'corrupt', corrupt, '', '', '', int(now)} end
return reply(rec, now, false)
