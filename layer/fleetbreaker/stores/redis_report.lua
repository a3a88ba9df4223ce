-- report: add one container's batch to the window (rate policy, slow calls, quorum) and trip
-- once when rules.should_trip says so. ARGV[3..6] are the report (container, calls, failures,
-- slow); ARGV[7] is the generation the counts were taken under ('' for any): counts of
-- another generation are dropped (rules.report_fits). The rate policy comes with the rest of
-- the policy: failure_ratio and slow_ratio as {numerator, denominator} (policy.exact_ratio),
-- failure_ratio and slow_ms absent when not set.
local now = clock(ARGV[1])
local policy = policy_from(ARGV)

-- policy.reaches: part / whole >= num / den, exactly. whole * num could pass 2^53, where
-- doubles stop being exact, so split whole = q * den + r: the test becomes
-- part - q * num >= r * num / den, whose right side is below num (den <= 10^6).
local function reaches(part, whole, frac)
  local num, den = frac[1], frac[2]
  local q = math.floor(whole / den)
  local r = whole - q * den
  -- whole / den is rounded: move q by one if that put r outside [0, den).
  if r < 0 then q, r = q - 1, r + den elseif r >= den then q, r = q + 1, r - den end
  local diff = part - q * num
  if diff >= num then return true end
  if diff < 0 then return false end
  return diff * den >= r * num
end

local failure_rate = policy.failure_ratio
local minimum_calls = policy.minimum_calls
local slow_ms = policy.slow_ms
local slow_rate = policy.slow_ratio
local min_containers = policy.min_containers
local bucket_ms = policy.bucket_ms
local window_ms = policy.window_ms
local container = ARGV[3]
local calls, failures, slow = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local key = KEYS[1]

local rec, _, old = read(key, now)
local current = rec or blank('closed', 0)
local report_gen = tonumber(ARGV[7])
if current.state ~= 'closed' or (calls == 0 and failures == 0 and slow == 0)
    or (report_gen ~= nil and report_gen ~= current.gen) then
  return reply(rec, now, false)
end

local function live(map)
  local n = 0
  for _, at in pairs(map) do if now - at < window_ms then n = n + 1 end end
  return n
end

-- As rules.quorum_unchanged: skip when this container or a full map was noted in the last bucket.
local function unchanged(map)
  if min_containers <= 1 then return true end
  local fresh = now - bucket_ms
  local at = map[container]
  if at ~= nil and at > fresh then return true end
  local count = 0
  for _, t in pairs(map) do
    if t <= fresh then return false end
    count = count + 1
  end
  return count >= min_containers
end

-- Stamp the container and keep the newest min_containers entries (ties: the larger id wins,
-- as in rules.note_container).
local function note(map)
  map[container] = now
  local count = 0
  for _ in pairs(map) do count = count + 1 end
  while count > min_containers do
    local oldest_id, oldest_at = nil, nil
    for id, at in pairs(map) do
      if oldest_at == nil or at < oldest_at or (at == oldest_at and id < oldest_id) then
        oldest_id, oldest_at = id, at
      end
    end
    map[oldest_id] = nil
    count = count - 1
  end
end

local counted = copy(current)
local idx = math.floor(now / bucket_ms)
local slot = idx % WINDOW_BUCKETS
local bucket = counted.buckets[slot]
if bucket == nil or bucket.idx ~= idx then
  bucket = {idx = idx, calls = 0, failures = 0, slow = 0, reports = 0}
end
counted.buckets[slot] = {
  idx = idx, calls = bucket.calls + calls, failures = bucket.failures + failures,
  slow = bucket.slow + slow, reports = bucket.reports + 1,
}
if failures > 0 and not unchanged(counted.failing) then note(counted.failing) end
if slow > 0 and not unchanged(counted.slowing) then note(counted.slowing) end

-- The whole window and its newest RECENT_BUCKETS buckets (rules.window_counts).
local total = {calls = 0, failures = 0, slow = 0}
local recent = {calls = 0, failures = 0, slow = 0}
for _, b in pairs(counted.buckets) do
  if idx - WINDOW_BUCKETS < b.idx and b.idx <= idx then
    total.calls = total.calls + b.calls
    total.failures = total.failures + b.failures
    total.slow = total.slow + b.slow
    if b.idx > idx - RECENT_BUCKETS then
      recent.calls = recent.calls + b.calls
      recent.failures = recent.failures + b.failures
      recent.slow = recent.slow + b.slow
    end
  end
end

-- window.judged: each window with its own minimum of calls.
local function judged(part, whole, frac)
  return whole >= minimum_calls and reaches(part, whole, frac)
end

-- window.SlidingWindow.trip_reason
local trips = false
local failing
if failure_rate == nil then
  failing = total.failures >= policy.failure_threshold
else
  failing = judged(total.failures, total.calls, failure_rate)
    or judged(recent.failures, recent.calls, failure_rate)
end
local slowing = slow_ms ~= nil and (
  (total.slow > 0 and judged(total.slow, total.calls, slow_rate))
  or (recent.slow > 0 and judged(recent.slow, recent.calls, slow_rate)))
if failing and (min_containers <= 1 or live(counted.failing) >= min_containers) then
  trips = true
elseif slowing and (min_containers <= 1 or live(counted.slowing) >= min_containers) then
  trips = true
end

if trips then
  return reply(save(key, trip(current, policy, now, total.failures), policy, now, old), now, true, 'closed', 'open')
end
return reply(save(key, counted, policy, now, old), now, true)
