"""Helpers shared by the observability tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleetbreaker import CircuitBreaker, MemoryStore

START_MS = 1_700_000_000_000


class FakeClock:
    """Epoch milliseconds that move only when a test says so."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += round(seconds * 1000)


class Boom(Exception):
    """The protected dependency failed."""


def fail() -> None:
    raise Boom("dependency down")


def succeed() -> str:
    return "ok"


class FlakyStore:
    """A MemoryStore that fails every operation while ``down`` is set."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.down = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def operation(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise ConnectionError("store unreachable")
            return attr(*args, **kwargs)

        return operation


BreakerFactory = Callable[..., CircuitBreaker]


class CapturingEmitter:
    """An X-Ray emitter that keeps the entities it is asked to send (no daemon, no UDP)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.sent.append(entity.to_dict())

    def set_daemon_address(self, address: str | None) -> None:
        pass

    @property
    def ip(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return 2000
