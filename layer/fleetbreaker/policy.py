"""The policy: a breaker's config as the numbers the rules and the stores need (ms, s).

Built once per breaker from its :class:`~fleetbreaker.config.BreakerConfig`, so the rules and
the stores never see callables or exception types. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from functools import cached_property, lru_cache
from typing import Protocol

from fleetbreaker.frozen import frozen, replace
from fleetbreaker.record import WINDOW_BUCKETS, State


class PolicySettings(Protocol):
    """What a Policy is derived from: the settings of a
    :class:`~fleetbreaker.config.BreakerConfig` it reads (a protocol, so this module stays
    below the config and the rules never see callables or exception types)."""

    @property
    def failure_threshold(self) -> int: ...
    @property
    def window_seconds(self) -> float: ...
    @property
    def recovery_timeout(self) -> float: ...
    @property
    def recovery_backoff(self) -> float: ...
    @property
    def max_recovery_timeout(self) -> float: ...
    @property
    def half_open_max_probes(self) -> int: ...
    @property
    def half_open_successes(self) -> int: ...
    @property
    def probe_lease_seconds(self) -> float: ...
    @property
    def record_ttl_seconds(self) -> int: ...
    @property
    def failure_rate_threshold(self) -> float | None: ...
    @property
    def minimum_calls(self) -> int: ...
    @property
    def slow_call_duration(self) -> float | None: ...
    @property
    def slow_call_rate_threshold(self) -> float: ...
    @property
    def min_containers(self) -> int: ...
    @property
    def reporting(self) -> bool: ...


# A rate threshold is compared as a fraction whose denominator is at most this: exact for any
# threshold written with up to six decimals, and small enough that the Redis scripts (doubles,
# exact to 2^53) compare it exactly too (see reaches()).
MAX_RATIO_DENOMINATOR = 1_000_000

# Operator overrides are held until released, so their records must outlive any idle TTL.
OVERRIDE_TTL_S = 10 * 366 * 86_400


def exact_ratio(rate: float) -> tuple[int, int]:
    """A rate threshold as the fraction its decimal text says: 0.55 is 11/20, not the double
    0.55000000000000004441 (so 55 of 100 reaches it). Past six decimals, the nearest fraction
    with a denominator up to MAX_RATIO_DENOMINATOR."""
    from fractions import Fraction  # a policy is built once per breaker: keep it off import

    exact = Fraction(repr(float(rate))).limit_denominator(MAX_RATIO_DENOMINATOR)
    return exact.numerator, exact.denominator


def reaches(part: int, whole: int, ratio: tuple[int, int]) -> bool:
    """Whether ``part / whole`` reaches the threshold ``ratio``, in integers (no rounding)."""
    numerator, denominator = ratio
    return part * denominator >= whole * numerator


@frozen
class Policy:
    """The numbers the store operations need, in store units (ms, s).

    Derived once from a BreakerConfig, so stores never see callables or exception types.
    """

    failure_threshold: int
    window_ms: int
    base_open_ms: int
    backoff: float
    max_open_ms: int
    max_probes: int
    successes_needed: int
    lease_ms: int
    ttl_s: int
    # Rate policy, slow calls, quorum: see BreakerConfig. ``reporting`` says whether
    # containers report batches through ``apply_report`` instead of ``apply_failure``.
    failure_rate: float | None = None
    minimum_calls: int = 20
    slow_ms: int | None = None
    slow_rate: float = 1.0
    min_containers: int = 1
    reporting: bool = False

    @cached_property
    def failure_ratio(self) -> tuple[int, int] | None:
        """``failure_rate`` as an exact fraction (numerator, denominator); see exact_ratio."""
        return None if self.failure_rate is None else exact_ratio(self.failure_rate)

    @cached_property
    def slow_ratio(self) -> tuple[int, int]:
        """``slow_rate`` as an exact fraction (numerator, denominator); see exact_ratio."""
        return exact_ratio(self.slow_rate)

    @property
    def bucket_ms(self) -> int:
        """Length of one of the window's WINDOW_BUCKETS slices."""
        return max(1, -(-self.window_ms // WINDOW_BUCKETS))

    @classmethod
    def from_config(cls, config: PolicySettings) -> Policy:
        slow = config.slow_call_duration
        # By position, in the fields' order (frozen's fast path: a breaker builds one at
        # construction): failure_threshold, window_ms, base_open_ms, backoff, max_open_ms,
        # max_probes, successes_needed, lease_ms, ttl_s, failure_rate, minimum_calls,
        # slow_ms, slow_rate, min_containers, reporting.
        return cls(
            config.failure_threshold,
            max(1, round(config.window_seconds * 1000)),
            max(1, round(config.recovery_timeout * 1000)),
            float(config.recovery_backoff),
            max(1, round(config.max_recovery_timeout * 1000)),
            config.half_open_max_probes,
            config.half_open_successes,
            max(1, round(config.probe_lease_seconds * 1000)),
            config.record_ttl_seconds,
            config.failure_rate_threshold,
            config.minimum_calls,
            None if slow is None else max(1, round(slow * 1000)),
            config.slow_call_rate_threshold,
            config.min_containers,
            config.reporting,
        )


@lru_cache(maxsize=32)
def alone(policy: Policy) -> Policy:
    """The policy a container applies on its own (store unreachable): the quorum counts as met
    by the container itself, so its local breaker can open on its own failures. A quorum of
    distinct containers is a fleet-wide rule; alone, a container only sees its own calls."""
    return policy if policy.min_containers <= 1 else replace(policy, min_containers=1)


def check_weight(weight: int) -> None:
    """Refuse a failure weight that is not a whole number of at least 1 (a caller's bug)."""
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        raise ValueError(f"a failure's weight is a whole number of at least 1, got {weight!r}")


def open_duration_ms(policy: Policy, reopens: int, jitter: float) -> int:
    """How long the breaker stays open after ``reopens`` failed recoveries.

    The first opening lasts exactly ``recovery_timeout``; each failed recovery multiplies
    it by ``recovery_backoff`` up to the cap, and ``jitter`` (a factor in (0, 1], drawn by
    the caller) spreads the reopen times of many breakers apart.
    """
    if reopens <= 0:
        return policy.base_open_ms
    grown = min(float(policy.max_open_ms), policy.base_open_ms * policy.backoff ** min(reopens, 64))
    return max(1, math.floor(grown * jitter))


def ttl_seconds(policy: Policy, state: State) -> int:
    """How long a record written in ``state`` may sit idle before it is garbage."""
    if state in (State.FORCED_OPEN, State.DISABLED):
        return max(policy.ttl_s, OVERRIDE_TTL_S)
    return policy.ttl_s
