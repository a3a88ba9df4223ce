"""Every sample event in events/ for the payment function, through its Lambda entry point.

The module is imported as Lambda imports it (handler built from the environment at import)
and reaches DynamoDB on the moto server through the standard AWS_ENDPOINT_URL_DYNAMODB
variable, and a fake provider over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.sam.conftest import EVENTS, invoke, load_event

# What each sample should answer. A new events/payment-*.json must be added here.
EXPECTED_STATUS = {
    "payment-ok.json": 200,
    "payment-ok-base64.json": 200,
    "payment-bad-body.json": 400,
    "payment-empty-body.json": 400,
    "payment-missing-fields.json": 400,
    "payment-invalid-fields.json": 400,
}
PAYMENT_EVENTS = sorted(EVENTS.glob("payment-*.json"))


def test_every_payment_event_has_an_expected_answer() -> None:
    # GIVEN the payment events on disk
    names = {path.name for path in PAYMENT_EVENTS}
    # THEN each one is listed above, and nothing listed is missing
    assert names == set(EXPECTED_STATUS)


@pytest.mark.parametrize("path", PAYMENT_EVENTS, ids=lambda path: path.name)
def test_payment_event(
    path: Path,
    payment_module: ModuleType,
    moto_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the function as Lambda loads it, with boto3 pointed at moto by the standard variable
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", moto_server)
    event = load_event(path)

    # WHEN the event is invoked through lambda_handler
    status, headers, body = invoke(payment_module.lambda_handler, event)

    # THEN the answer is the expected one, JSON, and never a server error
    assert status == EXPECTED_STATUS[path.name], body
    assert headers["Content-Type"] == "application/json"
    if status == 400:
        assert body["message"] == "invalid payment request"
        assert body["errors"], "a 400 says what is wrong"
    if status == 200:
        assert body["result"]["status"] == "succeeded"
    # The breaker really used the table, not a local fallback.
    assert not payment_module.handler.breaker.degraded


def test_request_keys_do_not_leak_into_the_next_invocation_logs(
    payment_module: ModuleType, moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a warm container that just charged a payment (its logs carry the idempotency key)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", moto_server)
    invoke(payment_module.lambda_handler, load_event(EVENTS / "payment-ok.json"))
    assert "idempotency_key" in payment_module.logger.get_current_keys()

    # WHEN the next request is invalid (it has no key of its own)
    status, _, _ = invoke(
        payment_module.lambda_handler, load_event(EVENTS / "payment-bad-body.json")
    )

    # THEN its logs do not carry the previous request's key
    assert status == 400
    assert "idempotency_key" not in payment_module.logger.get_current_keys()
