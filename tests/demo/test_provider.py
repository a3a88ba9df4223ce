"""The demo's payment API: its outage and its seeded background errors, over HTTP."""

from __future__ import annotations

import time

import requests

from bench.demo.provider import Outage, ScheduledPaymentApi

BODY = '{"amount": 1250, "currency": "EUR", "idempotency_key": "k"}'


def statuses(api: ScheduledPaymentApi, count: int) -> list[int]:
    with requests.Session() as session:
        return [session.post(api.url, data=BODY, timeout=5).status_code for _ in range(count)]


def test_noise_fails_the_same_requests_in_every_run_with_the_same_seed() -> None:
    # GIVEN a provider that is healthy (its outage long past) but fails 30 % of requests
    past = Outage(0.0, 1.0)
    with ScheduledPaymentApi() as api:
        api.schedule(past, noise=0.3, seed=7)
        first = statuses(api, 40)
        # WHEN a second run is scheduled with the same seed
        api.schedule(past, noise=0.3, seed=7)
        second = statuses(api, 40)

    # THEN it fails the same requests, some and not all of them, and logs what it answered
    assert first == second
    assert 0 < first.count(503) < 40
    assert set(first) == {200, 503}


def test_noise_off_means_a_healthy_provider_charges_every_request() -> None:
    with ScheduledPaymentApi() as api:
        api.schedule(Outage(0.0, 1.0))
        assert statuses(api, 20) == [200] * 20
        assert all(request.ok for request in api.requests())


def test_the_outage_fails_every_request_whatever_the_noise() -> None:
    now = time.time()
    with ScheduledPaymentApi() as api:
        api.schedule(Outage(now - 1, now + 60), noise=0.3, seed=7)
        assert statuses(api, 10) == [503] * 10
