"""What the demo runs: the fleet, the provider's outage and the breaker's thresholds.

The numbers are demo-sized (seconds, not the minutes of a real outage) and real time, because
people watch it. Both runs of one demo share every number here; only where the breaker keeps
its state differs (``--policy count``) or its policy (``--policy rate``: rate against count,
both shared).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from fleetbreaker import BreakerConfig

STORES = ("dynamodb", "redis", "memory")
STORE_NAMES = {"dynamodb": "DynamoDB", "redis": "Redis", "memory": "memory"}
STORE_LABELS = {
    "dynamodb": "one DynamoDB table (moto server)",
    "redis": "one Redis (redis-server)",
    "memory": "one MemoryStore shared through a local manager process",
}
FALLBACKS = ("reject", "defer")
POLICIES = ("count", "rate")
MODES = ("enforce", "shadow")
COUNT_WINDOW = 60.0  # BreakerConfig's window_seconds, which the payment function keeps
# The store deadline the demo gives the breaker on an emulated store (BREAKER_STORE_DEADLINE_
# SECONDS). moto's server applies one write at a time, and the shared MemoryStore's manager
# answers from one process: with the demo's fleet racing on one record of a 2-core machine,
# a write can queue past the function's 1 s default, and a container would go on local state
# for a reason no real DynamoDB would give it (it answers such writes in milliseconds).
# bench/workers.py gives moto the same 10 s. redis-server is the real thing: the 1 s stays.
EMULATED_STORE_DEADLINE = 10.0
EMULATED_STORES = {
    "dynamodb": "moto's server applies one write at a time (its client waits as long)",
    "memory": "one manager process answers every container",
}
FUNCTION_STORE_DEADLINE = BreakerConfig().store_deadline_seconds  # the function's: 1 s


class OptionsError(ValueError):
    """An option is out of range or needs something that is not installed."""


@dataclass(frozen=True)
class Options:
    """Everything one demo run is made of (``python -m bench.demo --help`` explains each)."""

    containers: int = 16
    rate: float = 5.0  # payments per second that each container receives
    healthy: float = 3.0  # seconds of healthy traffic before the outage
    outage: float = 5.0
    threshold: int = 5  # BREAKER_FAILURE_THRESHOLD
    recovery: float = 2.0  # BREAKER_RECOVERY_TIMEOUT: seconds open before a probe
    probes: int = 1  # BREAKER_HALF_OPEN_MAX_PROBES
    # BREAKER_CACHE_TTL. The function's default is 1 s against a 30 s recovery timeout; the
    # demo's seconds are compressed, and its cache with them.
    cache_ttl: float = 0.5
    store: str = "dynamodb"  # where the shared breaker keeps its state
    # OPEN_CIRCUIT_MODE while open: "defer" queues the payment in SQS (on moto) and answers
    # 202, the function's fallback; "reject" answers 503 with Retry-After.
    fallback: str = "defer"
    # "count": BREAKER_FAILURE_THRESHOLD failures in the window open the breaker (the demo
    # compares a shared breaker with per-container ones). "rate": the function also gets
    # BREAKER_FAILURE_RATE_THRESHOLD and BREAKER_MINIMUM_CALLS, and the demo compares the
    # shared rate breaker with the shared count breaker on the same traffic.
    policy: str = "count"
    # "shadow": the second run is a shared breaker in shadow mode (BREAKER_MODE) beside the
    # enforcing one: it lets every call through and counts what it would have rejected.
    mode: str = "enforce"
    failure_rate: float = 0.5  # BREAKER_FAILURE_RATE_THRESHOLD (rate policy)
    # BREAKER_MINIMUM_CALLS (rate policy): the default fleet makes 80 calls/s, so the window
    # holds this many within the first second.
    minimum_calls: int = 20
    # BREAKER_WINDOW_SECONDS of the rate policy. A rate trips once the outage's failures
    # outweigh the healthy calls still in the window, so a demo's seconds-long outage needs a
    # window of seconds. The count policy keeps the function's default (60 s), as deployed.
    window: float = 2.0
    # Background error rate: the fraction of requests the provider fails while otherwise
    # healthy, drawn from a generator seeded with ``seed`` (the same draws in every run).
    noise: float = 0.0
    seed: int = 1
    # BREAKER_RECOVERY_RAMP_SECONDS: after the close, each container admits a share of its
    # calls growing from 10 % to all over this many seconds (0: off, the function's default).
    ramp: float = 0.0
    # BREAKER_STORE_DEADLINE_SECONDS; None: EMULATED_STORE_DEADLINE on an emulated store,
    # else the function's default.
    store_deadline: float | None = None
    linger: float = 2.0  # seconds of traffic after every container has closed again
    max_after: float = 20.0  # stop this long after the recovery, closed or not
    output: Path = Path(__file__).resolve().parents[2] / "demo-output"  # gitignored

    def validate(self) -> Options:
        if not 1 <= self.containers <= 64:
            raise OptionsError(f"--containers must be 1 to 64, got {self.containers}")
        if not 0.5 <= self.rate <= 50:
            raise OptionsError(f"--rate must be 0.5 to 50 payments/s, got {self.rate}")
        for name in ("healthy", "outage", "recovery", "linger", "max_after"):
            value = getattr(self, name)
            if not 0 < value <= 600:
                raise OptionsError(f"--{name.replace('_', '-')} must be 0 to 600 s, got {value}")
        if self.threshold < 1:
            raise OptionsError(f"--threshold must be at least 1, got {self.threshold}")
        if not 1 <= self.probes <= 16:
            raise OptionsError(f"--probes must be 1 to 16, got {self.probes}")
        if not 0 <= self.ramp <= 600:
            raise OptionsError(f"--ramp must be 0 to 600 s, got {self.ramp}")
        if self.store_deadline is not None and not 0 < self.store_deadline <= 60:
            raise OptionsError(f"--store-deadline must be 0 to 60 s, got {self.store_deadline}")
        if not 0 <= self.cache_ttl <= 60:
            raise OptionsError(f"--cache-ttl must be 0 to 60 s, got {self.cache_ttl}")
        if self.store not in STORES:
            raise OptionsError(f"--store must be one of {STORES}, got {self.store!r}")
        if self.store == "redis" and shutil.which("redis-server") is None:
            raise OptionsError("--store redis needs redis-server on PATH (run `make redis`)")
        if self.mode not in MODES:
            raise OptionsError(f"--mode must be one of {MODES}, got {self.mode!r}")
        if self.policy not in POLICIES:
            raise OptionsError(f"--policy must be one of {POLICIES}, got {self.policy!r}")
        if not 0 < self.failure_rate <= 1:
            raise OptionsError(
                f"--failure-rate must be above 0 and at most 1, got {self.failure_rate}"
            )
        if self.minimum_calls < 1:
            raise OptionsError(f"--minimum-calls must be at least 1, got {self.minimum_calls}")
        if not 0 < self.window <= 600:
            raise OptionsError(f"--window must be 0 to 600 s, got {self.window}")
        if not 0 <= self.noise < 0.5:
            raise OptionsError(f"--noise must be at least 0 and below 0.5, got {self.noise}")
        if self.fallback not in FALLBACKS:
            raise OptionsError(f"--fallback must be one of {FALLBACKS}, got {self.fallback!r}")
        return self

    @property
    def needs_moto(self) -> bool:
        """moto serves DynamoDB for the shared store and SQS for deferred payments."""
        return self.store == "dynamodb" or self.fallback == "defer"

    @property
    def deadline(self) -> float:
        """The breaker's store deadline in this demo (seconds)."""
        if self.store_deadline is not None:
            return self.store_deadline
        return EMULATED_STORE_DEADLINE if self.store in EMULATED_STORES else FUNCTION_STORE_DEADLINE

    def deadline_words(self) -> str:
        """The store deadline, and why it differs from the function's default when it does."""
        if self.store_deadline is not None:
            return f"store deadline {self.deadline:g} s (--store-deadline)"
        if self.store in EMULATED_STORES:
            return (
                f"store deadline {self.deadline:g} s, not the function's "
                f"{FUNCTION_STORE_DEADLINE:g} s: {EMULATED_STORES[self.store]}"
            )
        return f"store deadline {self.deadline:g} s (the function's default)"

    def function_env(self, policy: str | None = None) -> dict[str, str]:
        """The payment function's breaker settings under ``policy`` (default: the chosen
        one), as its template would set them."""
        env = {
            "BREAKER_FAILURE_THRESHOLD": str(self.threshold),
            "BREAKER_RECOVERY_TIMEOUT": str(self.recovery),
            "BREAKER_HALF_OPEN_MAX_PROBES": str(self.probes),
            "BREAKER_CACHE_TTL": str(self.cache_ttl),
            "OPEN_CIRCUIT_MODE": self.fallback,
            "BREAKER_RECOVERY_RAMP_SECONDS": str(self.ramp),
            "BREAKER_STORE_DEADLINE_SECONDS": str(self.deadline),
        }
        if (policy or self.policy) == "rate":
            env["BREAKER_FAILURE_RATE_THRESHOLD"] = str(self.failure_rate)
            env["BREAKER_MINIMUM_CALLS"] = str(self.minimum_calls)
            env["BREAKER_WINDOW_SECONDS"] = str(self.window)
        return env

    def policy_words(self, policy: str) -> str:
        """The policy's rule, in words."""
        if policy == "rate":
            return (
                f"failure rate ≥ {self.failure_rate:g} of at least {self.minimum_calls} calls "
                f"in {self.window:g} s"
            )
        return f"{self.threshold} failures in {COUNT_WINDOW:g} s"

    def describe(self) -> str:
        return (
            f"{self.containers} containers × {self.rate:g} payments/s; provider healthy "
            f"{self.healthy:g} s, down {self.outage:g} s, then back"
            + (f", {self.noise:.1%} background errors (seed {self.seed})" if self.noise else "")
            + f"; {self.policy} policy ({self.policy_words(self.policy)}), recovery timeout "
            f"{self.recovery:g} s, probe budget {self.probes}, cache {self.cache_ttl:g} s"
            + (f", recovery ramp {self.ramp:g} s" if self.ramp else "")
            + f"; {self.deadline_words()}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in fields(self)}


DEFAULT = Options()
# For the test suite and a quick look: 32 s for both runs on an idle 2-core machine. The outage
# (2.5 s) is shorter than the first open window plus the jittered second (1 s + 1.6 to 2 s), so
# the shared breaker sees at most one failed probe (none when a busy machine trips it late),
# and the recovery one probe later. With --noise 0.02 the
# healthy 3 s (about 190 requests) must show the count breaker tripping on noise whatever pace
# a busy machine keeps: seed 5 fails 3 of the provider's first 48 requests (0.75 s at 64
# requests/s, a quarter of the healthy phase), and 5 of its first 67, which the rate breaker
# must shrug off. The rate window is 1 s so that the rate trips well inside the outage.
SHORT = replace(
    DEFAULT,
    containers=8,
    rate=8.0,
    healthy=3.0,
    outage=2.5,
    threshold=3,
    recovery=1.0,
    linger=1.0,
    window=1.0,
    seed=5,
)
