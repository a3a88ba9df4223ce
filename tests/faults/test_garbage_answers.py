"""Answers that are "200 OK" but not the store's answer count as store errors, never as "closed".

DynamoDB: a loopback proxy (tests/faults/garble.py) in front of moto's server rewrites each
200 body. Redis: a reply of the wrong shape (see tests/redis/test_redis_faults.py).
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable

import pytest

from devtools import servers
from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore, State
from fleetbreaker.errors import StoreError
from tests.faults.garble import GarbleProxy
from tests.support import Dependency, FakeClock, make_policy

# A deadline a loaded machine's moto cannot miss: the garbled answer must be what degrades.
CONFIG = BreakerConfig(failure_threshold=3, recovery_timeout=10, store_deadline_seconds=30)
NAME = "payment-api"


def not_json(body: bytes) -> bytes:
    return b"<html><body>502 Bad Gateway</body></html>"


def truncated(body: bytes) -> bytes:
    return body[: len(body) // 2]


def partial_item(body: bytes) -> bytes:
    # The item without its key and its generation, as a middlebox that cut it might leave it.
    answer = json.loads(body)
    for part in ("Item", "Attributes"):
        if part in answer:
            answer[part] = {k: v for k, v in answer[part].items() if k not in ("name", "gen")}
    return json.dumps(answer).encode()


GARBLES = {"not JSON": not_json, "truncated JSON": truncated, "partial item": partial_item}


@pytest.fixture
def moto_table(moto_server: str) -> tuple[str, str]:
    return moto_server, servers.make_table(moto_server)


def garbled_store(
    moto_table: tuple[str, str], garble: Callable[[bytes], bytes]
) -> tuple[DynamoDBStore, GarbleProxy]:
    endpoint, table = moto_table
    # GIVEN an open breaker in the table, written directly
    direct = DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    direct.force_state(NAME, make_policy(CONFIG), FakeClock()(), State.FORCED_OPEN)
    url = urllib.parse.urlsplit(endpoint)
    proxy = GarbleProxy((url.hostname or "127.0.0.1", url.port or 80), garble)
    return DynamoDBStore(table, endpoint_url=proxy.endpoint_url), proxy


@pytest.mark.parametrize("garble", GARBLES.values(), ids=GARBLES.keys())
def test_a_garbled_load_is_a_store_error(
    moto_table: tuple[str, str], garble: Callable[[bytes], bytes]
) -> None:
    store, proxy = garbled_store(moto_table, garble)
    with proxy, pytest.raises(StoreError):
        store.load(NAME, FakeClock()())


@pytest.mark.parametrize("garble", GARBLES.values(), ids=GARBLES.keys())
def test_a_garbled_write_is_a_store_error(
    moto_table: tuple[str, str], garble: Callable[[bytes], bytes]
) -> None:
    store, proxy = garbled_store(moto_table, garble)
    with proxy, pytest.raises(StoreError):
        store.force_state(NAME, make_policy(CONFIG), FakeClock()(), State.CLOSED)


@pytest.mark.parametrize("garble", GARBLES.values(), ids=GARBLES.keys())
def test_a_garbled_answer_degrades_the_breaker_and_is_logged_once(
    moto_table: tuple[str, str],
    garble: Callable[[bytes], bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, proxy = garbled_store(moto_table, garble)
    clock = FakeClock()
    breaker = CircuitBreaker(NAME, store=store, config=CONFIG, clock=clock)
    dep = Dependency()

    with proxy, caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        for _ in range(3):
            assert breaker.call(dep) == "ok"

    errors = [r for r in caplog.records if getattr(r, "breaker_event", "") == "store_error"]
    assert breaker.degraded
    assert breaker.stats.corrupt_records == 0
    assert len(errors) == 1
