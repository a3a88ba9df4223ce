"""The census: how many containers call a breaker, told by evidence, never by one event.

A healthy count-policy fleet writes nothing, so nothing in its record would tell 16 containers
from 5,000. Each container therefore turns a refresh read into a census write now and then:
at each refresh with the chance a Poisson clock of mean CENSUS_MEAN_MS would have ticked
since its previous refresh (at most MAX_CENSUS_GAP_MS of it), so an active container sends
one every CENSUS_MEAN_MS on average and an idle one owes none. The fleet's census writes
then arrive as a Poisson stream of containers / CENSUS_MEAN_S per second, with no schedule
to carry over: nothing lines containers up after a reset, a long idle or a degradation.

The record counts census writes in a ring of its own (``Record.census``, apart from the rate
policy's calls), in every state. The estimate reads it pessimistically, so that a fleet of
up to TARGET_FAILURE_WRITES_PER_S containers always counts every failure once:

- **evidence**: a span of the ring raises the estimate only with MIN_CENSUS_EVIDENCE census
  writes in it, and then only to the lower bound of the Poisson rate they show (CENSUS_Z
  standard deviations): one write 100 ms into a bucket says nothing;
- **decay**: every span ends now, so a quiet ring shows a falling rate, and a slice older
  than the window is never read;
- **scale-in**: the estimate is at most the upper bound its newest RECENT_SLICES slices
  show, so a fleet that shrank is believed within a slice and a few seconds of silence,
  not after a window (a longer span's upper bound would also cap a fleet that just grew);
- **cap**: at most MAX_CENSUS_CONTAINERS; a slice holding more than that many containers
  could have sent (a hand-edited 10^13) is not believed at all: it reads as empty.

The weight of a written failure is then ``floor(containers / TARGET_FAILURE_WRITES_PER_S)``,
1 to MAX_FAILURE_WEIGHT: the floor keeps a factor of two between the fleet the estimate must
show (600 containers) and the largest one whose failures must all count (300).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fleetbreaker.record import WINDOW_BUCKETS

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Record

# Each active container sends one census write per this many ms on average: 16 containers
# send one every 12.5 s, 5,000 send 25 a second (about $41 a month of DynamoDB write units).
CENSUS_MEAN_MS = 200_000
# The longest refresh gap that counts toward a census write (ms): a container idle for an
# hour owes no census for it. Twice the longest refresh interval (view.MAX_REFRESH_STRETCH
# times a 1 s cache_ttl) and at least a second, so cache_ttl=0 still counts its calls' gaps.
MIN_CENSUS_GAP_MS = 1_000
# Failure writes a count-policy fleet aims to send at most, per second, in the first second
# of an outage (before its containers learn of the trip): one DynamoDB partition takes 1,000.
TARGET_FAILURE_WRITES_PER_S = 300.0
# Census writes a span of the ring must hold before it can raise the estimate.
MIN_CENSUS_EVIDENCE = 30
# The spans whose upper bound caps the estimate: the current slice, and it with the one
# before (a fleet's silence shows there first).
RECENT_SLICES = 2
# Standard deviations between what a span shows and what the estimate believes (one-sided:
# 3 is a 1-in-740 chance per span of believing a rate above the true one).
CENSUS_Z = 3.0
# The largest weight a written failure counts for, and the largest fleet the census reports:
# a stored count past any real fleet (a hand-edited 10^13) is clamped, never trusted.
MAX_FAILURE_WEIGHT = 100
MAX_CENSUS_CONTAINERS = MAX_FAILURE_WEIGHT * TARGET_FAILURE_WRITES_PER_S


def census_chance(gap_ms: int) -> float:
    """The chance that a refresh ``gap_ms`` after the previous one is a census write."""
    return -math.expm1(-max(0, gap_ms) / CENSUS_MEAN_MS)


def poisson_lower(count: int, z: float = CENSUS_Z) -> float:
    """A lower bound on the mean of a Poisson count that came out as ``count``.

    Wilson and Hilferty's cube-root approximation of the chi-square quantile: within a few
    percent of the exact bound from a count of 10 on, and conservative below.
    """
    if count <= 0:
        return 0.0
    root = 1.0 - 1.0 / (9.0 * count) - z / (3.0 * math.sqrt(count))
    return count * max(root, 0.0) ** 3


def poisson_upper(count: int, z: float = CENSUS_Z) -> float:
    """An upper bound on the mean of a Poisson count that came out as ``count``."""
    above = count + 1
    root = 1.0 - 1.0 / (9.0 * above) + z / (3.0 * math.sqrt(above))
    return above * root**3


def census_containers(record: Record | None, policy: Policy, now_ms: int) -> float:
    """The containers calling the breaker, as the record's census shows them; 0.0 when it
    holds too little evidence.

    Each span of the ring that ends now (the current slice so far, then one older slice at
    a time, up to the window) gives a rate. The estimate is the largest lower bound among
    the spans with MIN_CENSUS_EVIDENCE writes, but no more than the smallest upper bound of
    the RECENT_SLICES shortest spans: a fleet that grew shows in its newest slices, one
    that shrank in their silence.
    """
    bucket_ms = policy.bucket_ms
    return containers_shown(record, now_ms, bucket_ms, max_slice_count(bucket_ms))


def containers_shown(record: Record | None, now_ms: int, bucket_ms: int, most: int) -> float:
    """:func:`census_containers`, given the policy's slice length (``Policy.bucket_ms``) and
    the most a slice of it may hold (:func:`max_slice_count`): a count-policy breaker reads
    the census on every store answer, and works these two out once per policy."""
    if record is None or not record.census:
        return 0.0
    current = now_ms // bucket_ms
    by_age = [0] * WINDOW_BUCKETS
    for bucket in record.census.values():
        age = current - bucket.idx
        if 0 <= age < WINDOW_BUCKETS and bucket.count <= most:
            by_age[age] = bucket.count
    if sum(by_age) < MIN_CENSUS_EVIDENCE:
        return 0.0  # the common case of a small fleet: no span has the evidence
    elapsed_ms = max(1, now_ms - current * bucket_ms)
    lower = 0.0
    upper = math.inf
    total = 0
    for age, count in enumerate(by_age):
        total += count
        span_s = (elapsed_ms + age * bucket_ms) / 1000
        if total >= MIN_CENSUS_EVIDENCE:
            lower = max(lower, poisson_lower(total) / span_s)
        if age < RECENT_SLICES:
            upper = min(upper, poisson_upper(total) / span_s)
    rate_per_s = min(lower, upper)
    return min(rate_per_s * CENSUS_MEAN_MS / 1000, MAX_CENSUS_CONTAINERS)


def max_slice_count(bucket_ms: int) -> int:
    """The most census writes a slice of ``bucket_ms`` can hold from MAX_CENSUS_CONTAINERS
    containers, with room for chance (ten standard deviations): a slice holding more was not
    written by any fleet (a hand-edited count) and is read as empty, not believed."""
    mean = MAX_CENSUS_CONTAINERS * bucket_ms / CENSUS_MEAN_MS
    return math.ceil(mean + 10 * math.sqrt(mean) + MIN_CENSUS_EVIDENCE)


def failure_weight(containers: float) -> int:
    """How many failures one written failure counts for, in a fleet of ``containers``.

    1 (every failure written) below twice TARGET_FAILURE_WRITES_PER_S containers; past it,
    each container writes a failure with probability 1 / weight, so the fleet's failure
    writes stay near the target and the count stays right on average.
    """
    weight = math.floor(containers / TARGET_FAILURE_WRITES_PER_S)
    return max(1, min(weight, MAX_FAILURE_WEIGHT))
