"""The payment function with its breaker in Redis, as the template's BreakerStore=redis sets it.

A real redis-server (the session's), the fake provider and a hand-moved clock. The store keeps
its default, the server's clock, as in Lambda: the test checks where the state lives and that
the containers share it, not when the open window ends (tests/redis covers that).
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest
import redis

from devtools.payment_api import FakePaymentApi
from fleetbreaker import RedisStore
from tests.sam.conftest import invoke, payment_event
from tests.support import FakeClock


def test_the_breaker_lives_in_redis_when_its_url_is_set(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    redis_server: str,
) -> None:
    # GIVEN two containers configured with a Redis URL (and the table, which stays unused)
    env = {
        **payment_env,
        "CIRCUIT_BREAKER_REDIS_URL": redis_server,
        "BREAKER_FAILURE_THRESHOLD": "2",
    }
    clock = FakeClock()
    a = payment_module.create_handler(env, clock=clock)
    b = payment_module.create_handler(env, clock=clock)
    payment_api.mode = "fail"

    # WHEN one payment fails in each
    statuses = [invoke(handler, payment_event())[0] for handler in (a, b)]

    # THEN the second failure opened the breaker both share, in Redis
    assert isinstance(a.breaker.store, RedisStore)
    assert statuses == [502, 502]
    raw = redis.Redis.from_url(redis_server, decode_responses=True)
    assert raw.hget(a.breaker.store.key(env["BREAKER_NAME"]), "state") == "open"
    raw.close()

    # and the next payment, once the cached copy has aged, is turned away without the API
    clock.advance(2)
    status, _, body = invoke(a, payment_event())
    assert (status, body["state"]) == (503, "open")
    assert payment_api.calls == 2
    assert not a.breaker.degraded
    for handler in (a, b):
        handler.breaker.store.close()


def test_a_redis_url_that_is_not_one_fails_at_init(payment_module: ModuleType) -> None:
    env = {
        "CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
        "PAYMENT_API_URL": "https://pay.test/c",
        "CIRCUIT_BREAKER_REDIS_URL": "cache.example:6379",
    }

    with pytest.raises(
        payment_module.SettingsError, match=re.escape("CIRCUIT_BREAKER_REDIS_URL must be a")
    ):
        payment_module.Settings.from_env(env)
