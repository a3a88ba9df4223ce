"""Small test doubles shared by the suites: a clock moved by hand, and stores that fail."""

from __future__ import annotations

import threading
from typing import Any

from fleetbreaker.errors import StoreError
from fleetbreaker.stores.memory import MemoryStore

T0 = 1_700_000_000_000


class FakeClock:
    """Epoch milliseconds that move only when a test says so."""

    def __init__(self, start_ms: int = T0) -> None:
        self.now = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += round(seconds * 1000)


class FlakyStore(MemoryStore):
    """A MemoryStore that can be switched to raise StoreError on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise StoreError("store is down (test)")

    def load(self, name: str, now_ms: int) -> Any:
        self._check()
        return super().load(name, now_ms)

    def record_failure(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().record_failure(*args, **kwargs)

    def claim_probe(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().claim_probe(*args, **kwargs)

    def settle_probe(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().settle_probe(*args, **kwargs)

    def force_state(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().force_state(*args, **kwargs)

    def report(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().report(*args, **kwargs)


class Dependency:
    """A protected function whose behaviour a test sets, counting the calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0
        self.failing = False

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        if self.failing:
            raise ConnectionError("dependency down (test)")
        return "ok"


def function_reads(source: str, variable: str) -> bool:
    """Whether a function's source reads an environment variable: by name, through
    BreakerConfig.from_env (the BREAKER_* settings), through Powertools (POWERTOOLS_*), or
    through boto3 (AWS_ENDPOINT_URL, its endpoint override for every client), through
    the store factory (the CIRCUIT_BREAKER_* store variables), or through the shared
    breaker_events.transition_listeners (BREAKER_MAPPINGS)."""
    from fleetbreaker.config import ENV_FIELDS
    from fleetbreaker.stores import STORE_VARIABLES

    # The store factory: fleetbreaker.stores.from_env or StoreSettings.from_env (both read
    # every store variable, the Redis store's IAM user and cache included).
    reads_store = "from fleetbreaker.stores import from_env" in source or (
        "StoreSettings.from_env(" in source
    )
    if variable == "AWS_ENDPOINT_URL":
        return "boto3" in source or "Store(" in source or reads_store
    if variable in STORE_VARIABLES:
        return reads_store
    if variable == "BREAKER_MAPPINGS":  # read by functions/shared/breaker_events.py
        return "transition_listeners(" in source
    if variable.startswith("POWERTOOLS_") or f'"{variable}"' in source:
        return True
    from_env = {f"BREAKER_{field.upper()}" for field in ENV_FIELDS}
    return variable in from_env and "BreakerConfig.from_env(" in source
