"""How long a container's cached view of its breaker's record stays fresh.

``cache_ttl`` for a small fleet. A large one stretches it (up to MAX_REFRESH_STRETCH), so the
fleet's refreshes of one record stay inside one DynamoDB partition's read units: each
container estimates the fleet's size from the record's call counts and its own call rate
(the rate policy, :func:`fleet_size`) or from the record's census (the count policy,
:func:`fleetbreaker.census.census_containers`). Both strategies share :func:`refresh_ms`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

    from fleetbreaker.policy import Policy
    from fleetbreaker.window import WindowCounts


# Cache refreshes the fleet aims to send to one record per second: 1,500 read units of
# eventually consistent reads (half a unit each), under 80 % of one partition's 3,000.
TARGET_REFRESHES_PER_S = 3_000.0
# A refresh waits at most this many cache_ttl: the longest a container acts on a view of the
# record (the documented maximum staleness, docs/architecture.md).
MAX_REFRESH_STRETCH = 2.0


def fleet_size(counts: WindowCounts, policy: Policy, own_calls: int, own_ms: int) -> float | None:
    """The containers calling a breaker: the fleet's call rate over this container's own.

    Every call is reported once, so the window's calls over its length are the fleet's call
    rate, whatever the intervals; Lambda spreads requests evenly over a function's
    containers. None when there is nothing to go on.
    """
    if counts.calls <= 0 or own_calls <= 0 or own_ms <= 0:
        return None
    return (counts.calls / policy.window_ms) / (own_calls / own_ms)


def refresh_ms(containers: float, cache_ms: int, rng: random.Random) -> int:
    """How long a container's cached view stays fresh, given the fleet's size.

    ``cache_ttl`` while the fleet's refreshes stay under TARGET_REFRESHES_PER_S; past that,
    stretched so they do, jittered by +-25 % (else containers that stretched together keep
    refreshing in the same instant), never shorter than ``cache_ttl`` nor longer than
    MAX_REFRESH_STRETCH of it.
    """
    wanted = containers * 1000 / TARGET_REFRESHES_PER_S
    if cache_ms <= 0 or wanted <= cache_ms:
        return cache_ms
    jittered = wanted * (0.75 + rng.random() / 2)
    return round(max(cache_ms, min(jittered, MAX_REFRESH_STRETCH * cache_ms)))
