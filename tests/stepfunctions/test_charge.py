"""The charge function (functions/charge/app.py) against a payment API on loopback."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.functions import load_function
from devtools.lambda_context import FakeLambdaContext
from tests.stepfunctions.harness import EVENTS_DIR, read_event
from tests.support import wait_for

app = load_function("charge")
CONTEXT = FakeLambdaContext(
    function_name="charge",
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:charge",
)
PAYMENT = read_event("statemachine-payment.json")


@pytest.fixture
def api(payment_api: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The container's client, pointed at the fake provider."""
    settings = app.ChargeSettings.from_env({"PAYMENT_API_URL": payment_api.url})
    monkeypatch.setattr(app, "api", app.PaymentApi(settings))
    return payment_api


def charge(event: Any) -> Any:
    return app.lambda_handler(event, CONTEXT)


@pytest.mark.parametrize("name", sorted(p.name for p in EVENTS_DIR.glob("charge-*.json")))
def test_charge_event_file(name: str, api: Any) -> None:
    assert charge(read_event(name))["status"] == "charged"


def test_the_workflow_input_is_a_valid_charge(api: Any) -> None:
    result = charge(PAYMENT)
    assert result == {
        "status": "charged",
        "idempotency_key": "order-1042",
        "provider_status": 200,
        "provider_response": {
            "id": "ch_order-1042",
            "status": "succeeded",
            "amount": PAYMENT["amount"],
            "currency": PAYMENT["currency"],
        },
    }
    (call,) = api.requests
    assert call.body == PAYMENT
    assert call.headers["Idempotency-Key"] == "order-1042"


@pytest.mark.parametrize("status", [400, 402, 404, 409, 422])
def test_a_refusal_is_a_declined_result_not_an_error(api: Any, status: int) -> None:
    api.answer(status, {"error": "card_declined"})
    result = charge(PAYMENT)
    assert (result["status"], result["provider_status"]) == ("declined", status)
    assert result["provider_response"] == {"error": "card_declined"}


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_provider_trouble_raises_payment_provider_error(api: Any, status: int) -> None:
    api.answer(status)
    with pytest.raises(app.PaymentProviderError, match=f"HTTP {status}"):
        charge(PAYMENT)


def test_a_success_without_a_json_object_is_provider_trouble(api: Any) -> None:
    api.answer(200, ["not", "an", "object"])
    with pytest.raises(app.PaymentProviderError, match="without a JSON object"):
        charge(PAYMENT)


def test_an_unreachable_provider_raises_quickly(
    refused_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{refused_port}/v1/charges"
    monkeypatch.setattr(
        app, "api", app.PaymentApi(app.ChargeSettings.from_env({"PAYMENT_API_URL": url}))
    )
    with pytest.raises(app.PaymentProviderError, match="unreachable"):
        charge(PAYMENT)


def test_a_silent_provider_times_out_after_the_read_timeout(
    blackhole: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = app.ChargeSettings.from_env(
        {"PAYMENT_API_URL": f"{blackhole.endpoint_url}/v1/charges", "PAYMENT_READ_TIMEOUT": "0.2"}
    )
    monkeypatch.setattr(app, "api", app.PaymentApi(settings))
    # WHEN a charge meets a provider that holds its answer
    with pytest.raises(app.PaymentProviderError, match="read timed out"):
        charge(PAYMENT)
    # THEN the read timeout ended it (the provider still holds the answer), after one request
    # (the server's accept loop may take its turn after the client gave up)
    wait_for(lambda: blackhole.accepted >= 1, "the provider accepting the charge's connection")
    assert blackhole.accepted == 1


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ("pay", "input: must be a JSON object, got string"),
        ({**PAYMENT, "amount": "12.50"}, "amount: must be an integer"),
        ({**PAYMENT, "amount": 0}, "amount: must be between 1"),
        ({**PAYMENT, "amount": True}, "amount: must be an integer"),
        ({**PAYMENT, "currency": "eur"}, "currency"),
        ({k: v for k, v in PAYMENT.items() if k != "idempotency_key"}, "idempotency_key"),
        ({**PAYMENT, "idempotency_key": "has space"}, "idempotency_key"),
        ({**PAYMENT, "description": "x" * 501}, "description"),
        ({**PAYMENT, "card": "4242"}, "'card': unknown field"),
    ],
)
def test_an_invalid_payment_is_refused_before_calling_the_provider(
    api: Any, event: Any, message: str
) -> None:
    with pytest.raises(app.InvalidPaymentRequest, match=message):
        charge(event)
    assert api.calls == 0


@pytest.mark.parametrize(
    ("event", "kind"),
    [(None, "null"), ([PAYMENT], "array"), (1250, "number"), (read_event("payment-ok.json"), "")],
    ids=["null", "list", "int", "api-gateway-event"],
)
def test_an_input_that_is_no_payment_is_refused_by_name(api: Any, event: Any, kind: str) -> None:
    # GIVEN an input of another shape (a direct invoke, an HTTP API event sent by mistake)
    # WHEN the charge step runs, THEN it raises InvalidPaymentRequest and sends nothing
    with pytest.raises(app.InvalidPaymentRequest) as raised:
        charge(event)
    if kind:
        assert str(raised.value) == f"input: must be a JSON object, got {kind}"
    else:
        assert "amount: required" in str(raised.value)
    assert api.calls == 0


def test_the_refusal_of_a_huge_input_is_bounded(api: Any) -> None:
    # GIVEN a payment carrying 190,000 unknown fields (about 4.6 MB of JSON)
    event = {**PAYMENT, **{f"field-{n:07d}": n for n in range(190_000)}}
    # WHEN the charge step refuses it
    with pytest.raises(app.InvalidPaymentRequest) as raised:
        charge(event)
    # THEN the error (the workflow's cause, at most 32 KB) lists a few and counts the rest
    message = str(raised.value)
    assert len(message) < 1000, len(message)
    assert message.endswith(f"... and {190_000 - 10} more unknown fields")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "PAYMENT_API_URL is required"),
        ({"PAYMENT_API_URL": "ftp://example.com"}, "must be an http"),
        ({"PAYMENT_API_URL": "https://x.test", "PAYMENT_READ_TIMEOUT": "-1"}, "must be > 0"),
        ({"PAYMENT_API_URL": "https://x.test", "PAYMENT_CONNECT_TIMEOUT": "soon"}, "number"),
    ],
)
def test_a_bad_environment_raises_charge_config_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(app.ChargeConfigError, match=message):
        app.ChargeSettings.from_env(env)


def test_the_charge_step_has_no_breaker_of_its_own() -> None:
    # The workflow counts outcomes through the gate; a breaker here would count them twice.
    assert not any(name.startswith("fleetbreaker") for name in vars(app) if name != "__name__")
    assert "fleetbreaker" not in {
        getattr(value, "__module__", "").split(".")[0] for value in vars(app).values()
    }


def test_a_bad_url_is_refused_without_the_key_it_carries() -> None:
    # GIVEN a provider URL with credentials and a key, and no http(s) scheme
    url = "ftp://shop:pa55word@pay.example.com/charge?api_key=k3y-7f"

    with pytest.raises(app.ChargeConfigError) as refused:
        app.ChargeSettings.from_env({"PAYMENT_API_URL": url})

    # THEN the message (it lands in the init log) names the URL without its secrets
    assert "ftp://shop:***@pay.example.com/charge?api_key=***" in str(refused.value)
