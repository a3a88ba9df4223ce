"""Helpers shared by the observability tests (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fleetbreaker import CircuitBreaker
from tests.support import FakeClock, FlakyStore

__all__ = [
    "Boom",
    "BreakerFactory",
    "CapturingEmitter",
    "FakeClock",
    "FlakyStore",
    "fail",
    "fail_async",
    "succeed",
    "succeed_async",
]


class Boom(Exception):
    """The protected dependency failed."""


def fail() -> None:
    raise Boom("dependency down")


def succeed() -> str:
    return "ok"


async def fail_async() -> None:
    """The awaited dependency fails after a suspension (the await is what is judged)."""
    await asyncio.sleep(0)
    raise Boom("dependency down")


async def succeed_async() -> str:
    await asyncio.sleep(0)
    return "ok"


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
