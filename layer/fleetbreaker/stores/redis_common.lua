-- fleetbreaker RedisStore: helpers shared by every operation's script.
--
-- RedisStore puts this file in front of each redis_<operation>.lua, so each operation is one
-- script, run atomically by one EVALSHA. The rules are rules.py's, translated line for line:
-- the contract suite runs the same tests against this and against MemoryStore.
--
-- Conventions: KEYS[1] is the breaker's hash; ARGV[1] is the caller's epoch ms, or "" to use
-- the server's TIME (the default: every container then shares one clock); ARGV[2] is the
-- policy, one JSON object (redis_scripts.policy_json); an operation's own arguments follow.
-- Numbers are Lua doubles, exact for the integers used here (epoch ms, counters); they are
-- stored and returned as decimal strings, never as floats.
--
-- The record's schema is fleetbreaker/record.py's: every upper-case placeholder wrapped in
-- double underscores is filled in from it by redis_scripts.py, so this file spells no stored
-- field name. In memory a record is a table keyed by the Python Record's attribute names
-- (rec.open_until, rec.leases, ...), as the rules are.

local MAX_SLOTS = __MAX_PROBE_SLOTS__
local CLOCK_TOLERANCE_MS = __CLOCK_TOLERANCE_MS__
local STATES = __STATES__
-- The stored name of the state; the integer and text fields as {attribute, stored name}.
local STATE_FIELD = __STATE_FIELD__
local NUMBERS = __NUMBER_FIELDS__
-- Integer fields added after the first release: absent or malformed reads as 0.
local OPTIONAL_NUMBERS = __OPTIONAL_NUMBER_FIELDS__
-- Operator fields (live tuning, last action): text that state changes carry over untouched.
local TEXTS = __TEXT_FIELDS__
-- Each probe slot's stored fields: {token, until, since}, by slot.
local LEASE_FIELDS = __LEASE_FIELDS__
-- Rate policy window: WINDOW_BUCKETS buckets, each a table of Bucket attribute -> stored
-- name (by slot), and the quorum maps (code -> Record attribute): fields
-- <code><QUORUM_SEPARATOR><container>, each the epoch ms of that container's latest.
local WINDOW_BUCKETS = __WINDOW_BUCKETS__
-- The short window judged beside the whole one (window.RECENT_BUCKETS).
local RECENT_BUCKETS = __RECENT_BUCKETS__
local BUCKET_FIELDS = __BUCKET_FIELDS__
-- The census ring (record.CensusBucket): WINDOW_BUCKETS slices, each {idx, count} by slot.
local CENSUS_FIELDS = __CENSUS_FIELDS__
local QUORUM_MAPS = __QUORUM_MAPS__
local QUORUM_SEPARATOR = __QUORUM_SEPARATOR__

local function int(n)
  return string.format('%d', n)
end

-- An optional minus and 1 to 14 digits (record.MAX_RECORD_DIGITS): a double holds 15 exactly,
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

-- The policy (ARGV[2]): Policy's fields by name (a None one absent), plus override_ttl_s,
-- bucket_ms, and the rate thresholds as exact fractions {numerator, denominator}.
local function policy_from(argv)
  return cjson.decode(argv[2])
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
  local state = raw[STATE_FIELD]
  if not STATES[state] then
    return nil, "field '" .. STATE_FIELD .. "' is not a breaker state: " .. shorten(state), old
  end
  local rec = {state = state, leases = {}}
  for _, field in ipairs(NUMBERS) do
    local attribute, name = field[1], field[2]
    rec[attribute] = parse_int(raw[name])
    if rec[attribute] == nil then
      return nil, "field '" .. name .. "' is missing or not an integer: " .. shorten(raw[name]),
        old
    end
  end
  for _, field in ipairs(OPTIONAL_NUMBERS) do rec[field[1]] = parse_int(raw[field[2]]) or 0 end
  -- Leases: a malformed one counts as free, as in the DynamoDB store.
  for slot = 0, MAX_SLOTS - 1 do
    local names = LEASE_FIELDS[slot]
    local token = raw[names[1]]
    local until_ms = parse_int(raw[names[2]])
    if token ~= nil and until_ms ~= nil then
      -- The grant time (on the claimer's clock) may be absent or malformed: then unknown.
      rec.leases[slot] = {token = token, until_ms = until_ms, since_ms = parse_int(raw[names[3]])}
    end
  end
  -- Buckets and quorum entries: a malformed one is dropped (read as empty), as in Python.
  rec.buckets, rec.failing, rec.slowing, rec.census = {}, {}, {}, {}
  for slot = 0, WINDOW_BUCKETS - 1 do
    local names = CENSUS_FIELDS[slot]
    local idx, count = parse_int(raw[names.idx]), parse_int(raw[names.count])
    if idx ~= nil and count ~= nil and count >= 0 then
      rec.census[slot] = {idx = idx, count = count}
    end
  end
  for slot = 0, WINDOW_BUCKETS - 1 do
    local names = BUCKET_FIELDS[slot]
    local idx = parse_int(raw[names.idx])
    if idx ~= nil then
      local bucket = {idx = idx}
      local ok = true
      for attribute, name in pairs(names) do
        if attribute ~= 'idx' then
          local n = parse_int(raw[name])
          if n == nil or n < 0 then ok = false else bucket[attribute] = n end
        end
      end
      if ok then rec.buckets[slot] = bucket end
    end
  end
  for code, map in pairs(QUORUM_MAPS) do
    local prefix = code .. QUORUM_SEPARATOR
    local n = #prefix
    for field, value in pairs(raw) do
      if #field > n and string.sub(field, 1, n) == prefix then
        local at = parse_int(value)
        if at ~= nil then rec[map][string.sub(field, n + 1)] = at end
      end
    end
  end
  for _, field in ipairs(TEXTS) do rec[field[1]] = raw[field[2]] end
  if rec.expires_at * 1000 <= now then return nil, nil, old end
  return rec, nil, old
end

-- A fresh record of a new state or generation. ``from`` is the record it replaces (or nil):
-- its census ring goes on, as the fleet's size does not change with the state.
local function blank(state, gen, from)
  local rec = {state = state, leases = {}, buckets = {}, failing = {}, slowing = {}, census = {}}
  for _, field in ipairs(NUMBERS) do rec[field[1]] = 0 end
  for _, field in ipairs(OPTIONAL_NUMBERS) do rec[field[1]] = 0 end
  if from ~= nil then
    for slot, slice in pairs(from.census or {}) do rec.census[slot] = slice end
  end
  rec.gen = gen
  return rec
end

local function copy(rec)
  local out = {}
  for k, v in pairs(rec) do out[k] = v end
  out.leases = {}
  for slot, lease in pairs(rec.leases) do out.leases[slot] = lease end
  out.buckets, out.failing, out.slowing, out.census = {}, {}, {}, {}
  for slot, bucket in pairs(rec.buckets or {}) do out.buckets[slot] = bucket end
  for slot, slice in pairs(rec.census or {}) do out.census[slot] = slice end
  for id, at in pairs(rec.failing or {}) do out.failing[id] = at end
  for id, at in pairs(rec.slowing or {}) do out.slowing[id] = at end
  return out
end

-- The record as stored: stored name -> string (save writes them, reply sends them). Text
-- fields that are nil or "" are left out.
local function fields_of(rec)
  local fields = {[STATE_FIELD] = rec.state}
  for _, field in ipairs(NUMBERS) do fields[field[2]] = int(rec[field[1]]) end
  for _, field in ipairs(OPTIONAL_NUMBERS) do fields[field[2]] = int(rec[field[1]] or 0) end
  for slot = 0, MAX_SLOTS - 1 do
    local lease, names = rec.leases[slot], LEASE_FIELDS[slot]
    if lease ~= nil then
      fields[names[1]] = lease.token
      fields[names[2]] = int(lease.until_ms)
      if lease.since_ms ~= nil then fields[names[3]] = int(lease.since_ms) end
    end
  end
  for slot, bucket in pairs(rec.buckets or {}) do
    for attribute, name in pairs(BUCKET_FIELDS[slot]) do fields[name] = int(bucket[attribute]) end
  end
  for slot, slice in pairs(rec.census or {}) do
    for attribute, name in pairs(CENSUS_FIELDS[slot]) do fields[name] = int(slice[attribute]) end
  end
  for code, map in pairs(QUORUM_MAPS) do
    for id, at in pairs(rec[map] or {}) do fields[code .. QUORUM_SEPARATOR .. id] = int(at) end
  end
  for _, field in ipairs(TEXTS) do
    local text = rec[field[1]]
    if text ~= nil and text ~= '' then fields[field[2]] = text end
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
-- new record lacks (ended leases, strays), and set the key's expiry. A breaker's write says
-- which window it counts over (rules._stamp); an operator's (``operator`` true) keeps the
-- record's, as the operator's tool may not know it.
local function save(key, rec, policy, now, old, operator)
  rec.updated_at = now
  rec.expires_at = math.floor(now / 1000) + ttl_seconds(policy, rec.state)
  if not operator then rec.window_ms = policy.window_ms end
  -- A record built from scratch (a transition) keeps the operator's fields of the one it
  -- replaces; "" clears a field.
  for _, field in ipairs(TEXTS) do
    if rec[field[1]] == nil and old.kind == 'hash' then rec[field[1]] = old.fields[field[2]] end
  end
  local fields = fields_of(rec)
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
    for field, value in pairs(fields_of(rec)) do
      out[#out + 1] = field
      out[#out + 1] = value
    end
  end
  return out
end

-- A lease granted later than this clock plus CLOCK_TOLERANCE_MS is free (rules.lease_ended):
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

-- rules.trip: the open record that replaces a closed one whose counts reached the threshold.
-- It keeps the failures that tripped it, for operators to see (no rule reads them).
local function trip(rec, policy, now, failures)
  local opened = blank('open', rec.gen + 1, rec)
  opened.failures = failures
  opened.opened_at = now
  opened.open_until = now + open_duration(policy, 0, 1.0)
  return opened
end

-- rules.reopen: the open record that replaces a half-open one whose probe failed.
local function reopen(rec, policy, now, jitter)
  local reopened = blank('open', rec.gen + 1, rec)
  reopened.failures = rec.failures
  reopened.reopens = rec.reopens + 1
  reopened.opened_at = now
  reopened.open_until = now + open_duration(policy, reopened.reopens, jitter)
  return reopened
end

-- Scripts written for Redis < 5 must ask for effects replication before writing after TIME;
-- later versions always replicate effects and keep this as a no-op.
if redis.replicate_commands ~= nil then redis.replicate_commands() end
