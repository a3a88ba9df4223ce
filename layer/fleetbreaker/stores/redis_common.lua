-- fleetbreaker RedisStore: helpers shared by every operation's script.
--
-- RedisStore puts this file in front of each redis_<operation>.lua, so each operation is one
-- script, run atomically by one EVALSHA. The rules are state.py's, translated line for line:
-- the contract suite runs the same tests against this and against MemoryStore.
--
-- Conventions: KEYS[1] is the breaker's hash; ARGV[1] is the caller's epoch ms, or "" to use
-- the server's TIME (the default: every container then shares one clock). Numbers are Lua
-- doubles, exact for the integers used here (epoch ms, counters); they are stored and returned
-- as decimal strings, never as floats.

local MAX_SLOTS = __MAX_PROBE_SLOTS__ -- state.MAX_PROBE_SLOTS, filled in by redis.py
local CLOCK_TOLERANCE_MS = __CLOCK_TOLERANCE_MS__ -- state.CLOCK_TOLERANCE_MS, likewise
local STATES = {closed = true, open = true, half_open = true, forced_open = true, disabled = true}
local NUMBERS = {
  'gen', 'failures', 'window_start', 'opened_at', 'open_until', 'reopens', 'successes',
  'updated_at', 'expires_at',
}
-- Operator fields (live tuning, last action): text that state changes carry over untouched.
local TEXTS = {'tuned', 'last_action'}

-- Rate policy window: WINDOW_BUCKETS buckets, fields w<slot>_<part> for the bucket's idx,
-- calls, failures, slow calls and reports; quorum maps as fields fq:<container> (failures)
-- and sq:<container> (slow calls), each holding the epoch ms of that container's latest.
local WINDOW_BUCKETS = 10
-- The short window judged beside the whole one (state.RECENT_BUCKETS, filled in by redis.py).
local RECENT_BUCKETS = __RECENT_BUCKETS__
local BUCKET_PARTS = {i = 'idx', c = 'calls', f = 'failures', s = 'slow', r = 'reports'}
local QUORUM_MAPS = {fq = 'failing', sq = 'slowing'}

local function int(n)
  return string.format('%d', n)
end

-- An optional minus and 1 to 14 digits (state.MAX_RECORD_DIGITS): a double holds 15 exactly,
-- and the spare digit keeps gen + 1 of an accepted record acceptable too. RedisStore's Python
-- parser applies the same rule.
local function parse_int(raw)
  if type(raw) ~= 'string' then return nil end
  local digits = string.match(raw, '^%-?(%d+)$')
  if digits == nil or #digits > __MAX_RECORD_DIGITS__ then return nil end
  return tonumber(raw)
end

local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function policy_from(argv)
  return {
    failure_threshold = tonumber(argv[2]),
    window_ms = tonumber(argv[3]),
    base_open_ms = tonumber(argv[4]),
    backoff = tonumber(argv[5]),
    max_open_ms = tonumber(argv[6]),
    max_probes = tonumber(argv[7]),
    successes_needed = tonumber(argv[8]),
    lease_ms = tonumber(argv[9]),
    ttl_s = tonumber(argv[10]),
    override_ttl_s = tonumber(argv[11]),
  }
end

local function shorten(value)
  local text = tostring(value)
  if #text > 40 then return string.sub(text, 1, 40) .. '...' end
  return text
end

-- The live record, or nil when the key is absent or past expires_at. A key this package did
-- not write also gives nil, plus the reason: load reports it as corrupt, every write replaces
-- it with a fresh record (as the DynamoDB store does). The third value describes what the key
-- held, for save().
local function read(key, now)
  local kind = redis.call('TYPE', key)['ok']
  local old = {kind = kind, fields = {}}
  if kind == 'none' then return nil, nil, old end
  if kind ~= 'hash' then return nil, 'key holds a ' .. kind .. ', not a hash', old end
  local flat = redis.call('HGETALL', key)
  local raw = old.fields
  for i = 1, #flat, 2 do raw[flat[i]] = flat[i + 1] end
  if not STATES[raw.state] then
    return nil, "field 'state' is not a breaker state: " .. shorten(raw.state), old
  end
  local rec = {state = raw.state, leases = {}}
  for _, field in ipairs(NUMBERS) do
    rec[field] = parse_int(raw[field])
    if rec[field] == nil then
      return nil, "field '" .. field .. "' is missing or not an integer: " .. shorten(raw[field]),
        old
    end
  end
  -- Leases: probe<slot>_token and probe<slot>_until. A malformed lease counts as free, as in
  -- the DynamoDB store. (Matching the fields present is cheaper than trying every slot.)
  for field, token in pairs(raw) do
    local slot = tonumber(string.match(field, '^probe([1-9]?%d)_token$'))
    if slot ~= nil and slot < MAX_SLOTS then
      local until_ms = parse_int(raw['probe' .. slot .. '_until'])
      -- The grant time (on the claimer's clock) may be absent or malformed: then unknown.
      local since_ms = parse_int(raw['probe' .. slot .. '_since'])
      if until_ms ~= nil then
        rec.leases[slot] = {token = token, until_ms = until_ms, since_ms = since_ms}
      end
    end
  end
  -- Buckets and quorum entries: a malformed one is dropped (read as empty), as in Python.
  rec.buckets, rec.failing, rec.slowing = {}, {}, {}
  for slot = 0, WINDOW_BUCKETS - 1 do
    local idx = parse_int(raw['w' .. slot .. '_i'])
    if idx ~= nil then
      local bucket = {idx = idx}
      local ok = true
      for part, name in pairs(BUCKET_PARTS) do
        if part ~= 'i' then
          local n = parse_int(raw['w' .. slot .. '_' .. part])
          if n == nil or n < 0 then ok = false else bucket[name] = n end
        end
      end
      if ok then rec.buckets[slot] = bucket end
    end
  end
  for field, value in pairs(raw) do
    local prefix, id = string.match(field, '^(%a%a):(.+)$')
    local map = QUORUM_MAPS[prefix]
    local at = parse_int(value)
    if map ~= nil and at ~= nil then rec[map][id] = at end
  end
  for _, field in ipairs(TEXTS) do rec[field] = raw[field] end
  if rec.expires_at * 1000 <= now then return nil, nil, old end
  return rec, nil, old
end

local function blank(state, gen)
  return {
    state = state, gen = gen, failures = 0, window_start = 0, opened_at = 0, open_until = 0,
    reopens = 0, successes = 0, updated_at = 0, expires_at = 0, leases = {},
    buckets = {}, failing = {}, slowing = {},
  }
end

local function copy(rec)
  local out = {}
  for k, v in pairs(rec) do out[k] = v end
  out.leases = {}
  for slot, lease in pairs(rec.leases) do out.leases[slot] = lease end
  out.buckets, out.failing, out.slowing = {}, {}, {}
  for slot, bucket in pairs(rec.buckets or {}) do out.buckets[slot] = bucket end
  for id, at in pairs(rec.failing or {}) do out.failing[id] = at end
  for id, at in pairs(rec.slowing or {}) do out.slowing[id] = at end
  return out
end

-- The window's extra fields, as field -> string (save and reply both send them).
local function window_fields(rec, fields)
  for slot, bucket in pairs(rec.buckets or {}) do
    for part, name in pairs(BUCKET_PARTS) do
      fields['w' .. slot .. '_' .. part] = int(bucket[name])
    end
  end
  for prefix, map in pairs(QUORUM_MAPS) do
    for id, at in pairs(rec[map] or {}) do fields[prefix .. ':' .. id] = int(at) end
  end
  return fields
end

local function ttl_seconds(policy, state)
  -- Operator overrides are held until released, so they must outlive any idle TTL.
  if state == 'forced_open' or state == 'disabled' then
    return math.max(policy.ttl_s, policy.override_ttl_s)
  end
  return policy.ttl_s
end

-- Write the whole record over what read() found (old): set every field, drop the fields the
-- new record lacks (ended leases, strays), and set the key's expiry.
local function save(key, rec, policy, now, old)
  rec.updated_at = now
  rec.expires_at = math.floor(now / 1000) + ttl_seconds(policy, rec.state)
  local fields = {state = rec.state}
  for _, field in ipairs(NUMBERS) do fields[field] = int(rec[field]) end
  for slot = 0, MAX_SLOTS - 1 do
    local lease = rec.leases[slot]
    if lease ~= nil then
      fields['probe' .. slot .. '_token'] = lease.token
      fields['probe' .. slot .. '_until'] = int(lease.until_ms)
      if lease.since_ms ~= nil then fields['probe' .. slot .. '_since'] = int(lease.since_ms) end
    end
  end
  window_fields(rec, fields)
  for _, field in ipairs(TEXTS) do
    -- A record built from scratch (a transition) keeps the operator's fields of the one it
    -- replaces; "" clears a field.
    if rec[field] == nil and old.kind == 'hash' then rec[field] = old.fields[field] end
    if rec[field] ~= nil and rec[field] ~= '' then fields[field] = rec[field] end
  end
  if old.kind ~= 'hash' and old.kind ~= 'none' then redis.call('DEL', key) end
  local args = {}
  for field, value in pairs(fields) do
    args[#args + 1] = field
    args[#args + 1] = value
  end
  -- HSET comes first: Redis checks maxmemory at a script's first write, and a DEL or HDEL
  -- there would let the rest of the script write past an OOM (noeviction) limit.
  redis.call('HSET', key, unpack(args))
  local stale = {}
  for field in pairs(old.fields) do
    if fields[field] == nil then stale[#stale + 1] = field end
  end
  if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
  -- Relative, not PEXPIREAT: with a caller's clock (tests pass fixed epoch times) the key
  -- still lives its full TTL on the server's clock. With the server's TIME both agree.
  redis.call('PEXPIRE', key, int(rec.expires_at * 1000 - now))
  return rec
end

-- The reply every script gives: status, changed, transition (from, to), token, the clock it
-- used, then the record as field/value pairs (none when there is no record).
local function reply(rec, now, changed, from, to, token)
  local out = {'ok', changed and '1' or '0', from or '', to or '', token or '', int(now)}
  if rec ~= nil then
    out[#out + 1] = 'state'
    out[#out + 1] = rec.state
    for _, field in ipairs(NUMBERS) do
      out[#out + 1] = field
      out[#out + 1] = int(rec[field])
    end
    for slot = 0, MAX_SLOTS - 1 do
      local lease = rec.leases[slot]
      if lease ~= nil then
        out[#out + 1] = 'probe' .. slot .. '_token'
        out[#out + 1] = lease.token
        out[#out + 1] = 'probe' .. slot .. '_until'
        out[#out + 1] = int(lease.until_ms)
        if lease.since_ms ~= nil then
          out[#out + 1] = 'probe' .. slot .. '_since'
          out[#out + 1] = int(lease.since_ms)
        end
      end
    end
    for field, value in pairs(window_fields(rec, {})) do
      out[#out + 1] = field
      out[#out + 1] = value
    end
    for _, field in ipairs(TEXTS) do
      if rec[field] ~= nil and rec[field] ~= '' then
        out[#out + 1] = field
        out[#out + 1] = rec[field]
      end
    end
  end
  return out
end

-- A lease granted later than this clock plus CLOCK_TOLERANCE_MS is free (state.lease_ended):
-- a prober whose clock ran far ahead cannot hold its slot for long.
local function lease_ended(lease, now)
  if lease.until_ms <= now then return true end
  return lease.since_ms ~= nil and lease.since_ms > now + CLOCK_TOLERANCE_MS
end

local function free_slot(rec, policy, now)
  for slot = 0, policy.max_probes - 1 do
    local lease = rec.leases[slot]
    if lease == nil or lease_ended(lease, now) then return slot end
  end
  return nil
end

-- Tokens look like "<slot>-<nonce>": one or two digits, a dash, a non-empty nonce.
local function lease_slot(token)
  local head = string.match(token, '^(%d%d?)%-.')
  if head == nil then return nil end
  return tonumber(head)
end

local function holds_lease(rec, token, now)
  local slot = lease_slot(token)
  if rec == nil or rec.state ~= 'half_open' or slot == nil then return false end
  local lease = rec.leases[slot]
  return lease ~= nil and lease.token == token and lease.until_ms > now
end

local function open_duration(policy, reopens, jitter)
  if reopens <= 0 then return policy.base_open_ms end
  local grown = math.min(
    policy.max_open_ms, policy.base_open_ms * policy.backoff ^ math.min(reopens, 64))
  return math.max(1, math.floor(grown * jitter))
end

-- Scripts written for Redis < 5 must ask for effects replication before writing after TIME;
-- later versions always replicate effects and keep this as a no-op.
if redis.replicate_commands ~= nil then redis.replicate_commands() end
