"""Replies of the wrong shape from a real redis-server count as store errors, never "closed".

The store's load script is swapped for one that answers a wrong shape, on a real server: a
stand-in for a proxy, a script of another version, or a broken server.
"""

from __future__ import annotations

import hashlib
import logging
import types
from collections.abc import Callable

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, RedisStore
from fleetbreaker.errors import CorruptRecordError, StoreError
from tests.support import Dependency, FakeClock

MakeStore = Callable[..., RedisStore]
T0 = 1_700_000_000_000

WRONG_SHAPES = {
    "not a list": "return 'OK'",
    "too short": "return {'ok', '0'}",
    "unknown status": "return {'sideways', '0', '', '', '', '0'}",
    "changed not a flag": "return {'ok', 'maybe', '', '', '', '0'}",
    "odd field list": "return {'ok', '0', '', '', '', '0', 'state'}",
    "unknown transition": "return {'ok', '1', 'ajar', 'open', '', '0'}",
    "record the script would reject": (
        "return {'ok', '0', '', '', '', '0', 'state', 'closed', 'gen', '1.5'}"
    ),
}


def answering(store: RedisStore, source: str) -> RedisStore:
    """Make the store's load script answer with ``source`` (run on the real server)."""
    sha = hashlib.sha1(source.encode()).hexdigest()
    store._scripts["load"] = types.SimpleNamespace(operation="load", source=source, sha=sha)  # type: ignore[assignment]
    return store


@pytest.mark.parametrize("source", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_a_reply_of_the_wrong_shape_is_a_store_error(
    make_store: MakeStore, name: str, source: str
) -> None:
    store = answering(make_store(), source)

    with pytest.raises(StoreError) as info:
        store.load(name, T0)

    assert not isinstance(info.value, CorruptRecordError)
    assert name in str(info.value)


@pytest.mark.parametrize("source", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_a_reply_of_the_wrong_shape_degrades_the_breaker_and_is_logged_once(
    make_store: MakeStore, name: str, source: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = answering(make_store(), source)
    # (a deadline a loaded machine cannot miss: the reply's shape must be what degrades)
    config = BreakerConfig(store_deadline_seconds=30)
    breaker = CircuitBreaker(name, store=store, config=config, clock=FakeClock(T0))

    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        for _ in range(3):
            assert breaker.call(Dependency()) == "ok"

    errors = [r for r in caplog.records if getattr(r, "breaker_event", "") == "store_error"]
    assert breaker.degraded
    assert breaker.stats.corrupt_records == 0
    assert len(errors) == 1
