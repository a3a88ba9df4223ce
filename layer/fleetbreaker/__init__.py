"""fleetbreaker: one circuit breaker per dependency for a whole fleet of Lambda containers.

Example
-------
>>> from fleetbreaker import CircuitBreaker, BreakerConfig, DynamoDBStore
>>> breaker = CircuitBreaker(
...     "payment-api",
...     store=DynamoDBStore(table_name="CircuitBreakers"),
...     config=BreakerConfig(failure_threshold=5, recovery_timeout=30),
... )
>>> @breaker
... def charge(order): ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetbreaker._version import __version__
from fleetbreaker.breaker import CircuitBreaker
from fleetbreaker.config import BreakerConfig
from fleetbreaker.errors import (
    CircuitOpenError,
    ConfigError,
    CorruptRecordError,
    FleetBreakerError,
    InvalidTokenError,
    StoreDeadlineError,
    StoreError,
    StoreMisconfiguredError,
    TableNotFoundError,
)
from fleetbreaker.events import BreakerListener, LoggingListener, StateChange
from fleetbreaker.record import Decision, State
from fleetbreaker.results import Admission, RecordResult, StoreErrorStats
from fleetbreaker.stores.fallback import FallbackStore

if TYPE_CHECKING:
    from fleetbreaker.restore import after_restore, before_snapshot
    from fleetbreaker.stores.dynamodb import DynamoDBStore
    from fleetbreaker.stores.memory import MemoryStore
    from fleetbreaker.stores.redis import RedisStore

__all__ = [
    "Admission",
    "__version__",
    "after_restore",
    "before_snapshot",
    "BreakerConfig",
    "BreakerListener",
    "CircuitBreaker",
    "CircuitOpenError",
    "ConfigError",
    "CorruptRecordError",
    "Decision",
    "DynamoDBStore",
    "FallbackStore",
    "FleetBreakerError",
    "InvalidTokenError",
    "LoggingListener",
    "MemoryStore",
    "RecordResult",
    "RedisStore",
    "State",
    "StateChange",
    "StoreDeadlineError",
    "StoreError",
    "StoreErrorStats",
    "StoreMisconfiguredError",
    "TableNotFoundError",
]


def __getattr__(name: str) -> Any:
    # Stores load on first use, keeping `import fleetbreaker` light: those with optional
    # dependencies, and MemoryStore (a healthy breaker on a shared store never needs it).
    if name == "MemoryStore":
        from fleetbreaker.stores.memory import MemoryStore

        return MemoryStore
    if name == "DynamoDBStore":
        from fleetbreaker.stores.dynamodb import DynamoDBStore

        return DynamoDBStore
    if name == "RedisStore":
        from fleetbreaker.stores.redis import RedisStore

        return RedisStore
    if name in ("after_restore", "before_snapshot"):
        # The snapshot hooks (Lambda SnapStart calls them itself; other snapshot mechanisms
        # call them): fleetbreaker.restore loads with the first breaker, or here.
        from fleetbreaker import restore

        hook: Any = getattr(restore, name)
        return hook
    raise AttributeError(f"module 'fleetbreaker' has no attribute {name!r}")
