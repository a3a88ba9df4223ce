"""What the demo runs: the fleet, the provider's outage and the breaker's thresholds.

The numbers are demo-sized (seconds, not the minutes of a real outage) and real time, because
people watch it. Both runs of one demo share every number here; only where the breaker keeps
its state differs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

STORES = ("dynamodb", "redis", "memory")
STORE_NAMES = {"dynamodb": "DynamoDB", "redis": "Redis", "memory": "memory"}
STORE_LABELS = {
    "dynamodb": "one DynamoDB table (moto server)",
    "redis": "one Redis (redis-server)",
    "memory": "one MemoryStore shared through a local manager process",
}
FALLBACKS = ("reject", "defer")


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
    # BREAKER_RECOVERY_RAMP_SECONDS: after the close, each container admits a share of its
    # calls growing from 10 % to all over this many seconds (0: off, the function's default).
    ramp: float = 0.0
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
        if not 0 <= self.cache_ttl <= 60:
            raise OptionsError(f"--cache-ttl must be 0 to 60 s, got {self.cache_ttl}")
        if self.store not in STORES:
            raise OptionsError(f"--store must be one of {STORES}, got {self.store!r}")
        if self.store == "redis" and shutil.which("redis-server") is None:
            raise OptionsError("--store redis needs redis-server on PATH (run `make redis`)")
        if self.fallback not in FALLBACKS:
            raise OptionsError(f"--fallback must be one of {FALLBACKS}, got {self.fallback!r}")
        return self

    @property
    def needs_moto(self) -> bool:
        """moto serves DynamoDB for the shared store and SQS for deferred payments."""
        return self.store == "dynamodb" or self.fallback == "defer"

    def function_env(self) -> dict[str, str]:
        """The payment function's breaker settings, as its template would set them."""
        return {
            "BREAKER_FAILURE_THRESHOLD": str(self.threshold),
            "BREAKER_RECOVERY_TIMEOUT": str(self.recovery),
            "BREAKER_HALF_OPEN_MAX_PROBES": str(self.probes),
            "BREAKER_CACHE_TTL": str(self.cache_ttl),
            "OPEN_CIRCUIT_MODE": self.fallback,
            "BREAKER_RECOVERY_RAMP_SECONDS": str(self.ramp),
        }

    def describe(self) -> str:
        return (
            f"{self.containers} containers × {self.rate:g} payments/s; provider healthy "
            f"{self.healthy:g} s, down {self.outage:g} s, then back; threshold "
            f"{self.threshold}, recovery timeout {self.recovery:g} s, probe budget "
            f"{self.probes}, cache {self.cache_ttl:g} s"
            + (f", recovery ramp {self.ramp:g} s" if self.ramp else "")
        )

    def as_dict(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in fields(self)}


DEFAULT = Options()
# For the test suite and a quick look: about 12 s for both runs. The outage (2.5 s) is shorter
# than the first open window plus the jittered second (1 s + 1.6 to 2 s), so the shared breaker
# sees exactly one failed probe, and the recovery one probe later.
SHORT = replace(
    DEFAULT, containers=8, rate=8.0, healthy=1.5, outage=2.5, threshold=3, recovery=1.0, linger=1.0
)
