"""The payment function's input and settings validation: bad input is a 400, never a 500."""

from __future__ import annotations

import base64
import json
import re
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetbreaker import BreakerConfig
from fleetbreaker.stores import StoreSettings
from tests.coverage_scope import traced, untraced
from tests.sam.conftest import invoke, payment_event

VALID = {"amount": 1250, "currency": "EUR", "idempotency_key": "order-1"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("", "body: a JSON object is required"),
        ("[1, 2]", "body: must be a JSON object"),
        ('{"amount": NaN}', "body: not valid JSON"),
        ("[" * 100_000, "body: not valid JSON"),
        (json.dumps({**VALID, "amount": True}), "amount: must be an integer"),
        (json.dumps({**VALID, "amount": "12.50"}), "amount: must be an integer"),
        (json.dumps({**VALID, "amount": 0}), "amount: must be between 1 and 100000000"),
        (json.dumps({**VALID, "amount": 10**9}), "amount: must be between 1 and 100000000"),
        (json.dumps({**VALID, "currency": "eur"}), "currency: must be a three-letter"),
        (json.dumps({**VALID, "currency": None}), "currency: required"),
        (json.dumps({**VALID, "idempotency_key": ""}), "idempotency_key: must be 1 to 255"),
        (json.dumps({**VALID, "idempotency_key": "k" * 256}), "idempotency_key: must be 1 to 255"),
        (json.dumps({**VALID, "description": 5}), "description: must be a string"),
        (json.dumps({**VALID, "card_number": "4242"}), "'card_number': unknown field"),
    ],
)
def test_invalid_body_names_the_problem(payment_module: ModuleType, body: str, error: str) -> None:
    # WHEN a malformed body is parsed
    with pytest.raises(payment_module.InvalidPayment) as raised:
        payment_module.parse_payment(body)
    # THEN the error names the field and the rule
    assert any(message.startswith(error) for message in raised.value.errors), raised.value.errors


def test_valid_body_is_parsed(payment_module: ModuleType) -> None:
    payment = payment_module.parse_payment(json.dumps({**VALID, "description": "Order 1"}))
    assert payment == payment_module.PaymentRequest(1250, "EUR", "order-1", "Order 1")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


bodies = (
    st.text()
    | json_values.map(json.dumps)
    | st.fixed_dictionaries(
        {},
        optional={
            "amount": json_values,
            "currency": json_values,
            "idempotency_key": json_values,
            "description": json_values,
        },
    ).map(json.dumps)
)


def parsed_or_refused(payment_module: ModuleType, body: str) -> list[str]:
    """What parse_payment answers: ["(valid)"], or the InvalidPayment's errors; anything
    else it raises goes up."""
    try:
        payment_module.parse_payment(body)
    except payment_module.InvalidPayment as exc:
        return list(exc.errors)
    return ["(valid)"]


def test_parser_raises_nothing_but_invalid_payment(payment_module: ModuleType) -> None:
    # Hypothesis draws the 300 bodies with coverage's tracer off (its engine is not the
    # code under test: 2.2 s of CPU traced); each body is parsed traced (tests/coverage_scope.py).
    @settings(max_examples=300, deadline=None)
    @given(body=bodies)
    def any_text(body: str) -> None:
        # WHEN any text is parsed, THEN the answer is a payment or InvalidPayment, nothing else
        assert traced(parsed_or_refused, payment_module, body)

    untraced(any_text)()


@pytest.mark.parametrize(
    "event_change",
    [
        {"isBase64Encoded": True, "body": "%%% not base64 %%%"},
        {"isBase64Encoded": True, "body": base64.b64encode(b"\xff\xfe").decode()},
        {"body": None},
    ],
    ids=["bad-base64", "not-utf8", "no-body"],
)
def test_undecodable_body_is_a_400(
    payment_module: ModuleType, payment_env: dict[str, str], event_change: dict[str, Any]
) -> None:
    # GIVEN a request whose body cannot be decoded
    handler = payment_module.create_handler(payment_env)
    event = {**payment_event(), **event_change}
    # WHEN it is handled, THEN it is a 400 (the provider and the table are never reached)
    status, _, body = invoke(handler, event)
    assert status == 400, body
    assert body["errors"]


# --------------------------------------------------------------------------- hostile events


def _api_event(**change: Any) -> dict[str, Any]:
    return {**payment_event(), **change}


def _without(name: str) -> dict[str, Any]:
    event = payment_event()
    del event[name]
    return event


@pytest.mark.parametrize(
    ("event", "error"),
    [
        (None, "event: must be a JSON object (an HTTP API event), got null"),
        ([payment_event()], "event: must be a JSON object (an HTTP API event), got array"),
        ("POST /payments", "event: must be a JSON object (an HTTP API event), got string"),
        (7, "event: must be a JSON object (an HTTP API event), got number"),
        ({}, "requestContext: must be an object, got null"),
        (_without("requestContext"), "requestContext: must be an object, got null"),
        (_api_event(requestContext={"http": {}}), "requestContext.http.method: required, a string"),
        (_without("rawPath"), "rawPath: must be a string, got null"),
        (_api_event(body=1250), "body: must be a string or null, got number"),
        (_api_event(body={"amount": 1250}), "body: must be a string or null, got object"),
        (_api_event(headers=["content-type"]), "headers: must be an object of strings"),
        (_api_event(isBase64Encoded="yes"), "isBase64Encoded: must be true or false, got string"),
    ],
    ids=[
        "null",
        "list",
        "string",
        "int",
        "empty",
        "no-requestContext",
        "no-method",
        "no-rawPath",
        "int-body",
        "object-body",
        "list-headers",
        "string-isBase64Encoded",
    ],
)
def test_an_event_not_shaped_like_an_http_api_event_is_a_400(
    payment_module: ModuleType, payment_env: dict[str, str], event: Any, error: str
) -> None:
    # GIVEN the handler, and an event that no HTTP API would send
    handler = payment_module.create_handler(payment_env)
    # WHEN it is handled
    status, headers, body = invoke(handler, event)
    # THEN the answer is a JSON 400 naming the problem, and the provider is never called
    assert status == 400, body
    assert headers["Content-Type"] == "application/json"
    assert body["message"] == "not an API Gateway HTTP API request"
    assert error in body["errors"], body["errors"]


@pytest.mark.parametrize("event", [None, [], "x", 7, {}], ids=["null", "list", "str", "int", "{}"])
def test_the_lambda_entry_point_answers_a_shapeless_event_with_a_400(
    payment_module: ModuleType, event: Any
) -> None:
    # GIVEN the function as Lambda loads it (Powertools' decorators around the handler)
    # WHEN a shapeless event is invoked, THEN the decorators let it through to the 400
    status, _, body = invoke(payment_module.lambda_handler, event)
    assert status == 400, body


def test_a_body_of_millions_of_unknown_fields_gets_a_bounded_400(
    payment_module: ModuleType, payment_env: dict[str, str]
) -> None:
    # GIVEN a request whose 4.6 MB body is a valid payment plus 190,000 unknown fields
    fields = {f"field-{n:07d}": n for n in range(190_000)}
    event = payment_event(body={**VALID, **fields})
    assert len(event["body"]) > 4_600_000
    handler = payment_module.create_handler(payment_env)
    # WHEN it is handled
    result = handler(event, None)
    # THEN the 400 lists a few of the fields and says how many it left out, in a few KB
    assert result["statusCode"] == 400
    assert len(result["body"]) < 4096, len(result["body"])
    errors = json.loads(result["body"])["errors"]
    assert errors[0] == "'field-0000000': unknown field"
    assert f"... and {190_000 - 10} more unknown fields" in errors


def test_a_huge_unknown_field_name_is_quoted_in_part(payment_module: ModuleType) -> None:
    # WHEN a field name of a million characters is refused, THEN the error quotes its start
    with pytest.raises(payment_module.InvalidPayment) as raised:
        payment_module.parse_payment(json.dumps({**VALID, "x" * 1_000_000: 1}))
    (error,) = raised.value.errors
    assert len(error) < 200
    assert error.endswith("(1000000 characters): unknown field")


# --------------------------------------------------------------------------- settings

BASE_ENV = {"CIRCUIT_BREAKER_TABLE": "CircuitBreakers", "PAYMENT_API_URL": "https://pay.test/c"}


def test_settings_defaults(payment_module: ModuleType) -> None:
    settings = payment_module.Settings.from_env(BASE_ENV)
    assert settings.breaker_name == "payment-api"
    assert settings.breaker_config.failure_threshold == 5
    assert settings.breaker_config.failure_exceptions == (payment_module.PaymentProviderError,)
    assert (settings.connect_timeout, settings.read_timeout) == (1.0, 5.0)
    assert settings.open_circuit_mode == "reject"


def test_settings_read_every_variable(payment_module: ModuleType) -> None:
    env = {
        **BASE_ENV,
        "BREAKER_NAME": "psp",
        "BREAKER_FAILURE_THRESHOLD": "7",
        "BREAKER_WINDOW_SECONDS": "30",
        "BREAKER_RECOVERY_TIMEOUT": "12.5",
        "BREAKER_HALF_OPEN_MAX_PROBES": "2",
        "BREAKER_CACHE_TTL": "0",
        "PAYMENT_CONNECT_TIMEOUT": "0.5",
        "PAYMENT_READ_TIMEOUT": "3",
        "OPEN_CIRCUIT_MODE": "defer",
        "DEFERRED_PAYMENTS_QUEUE_URL": "https://sqs.test/q",
    }
    settings = payment_module.Settings.from_env(env)
    assert settings == payment_module.Settings(
        store=StoreSettings(table_name="CircuitBreakers"),
        payment_api_url="https://pay.test/c",
        breaker_name="psp",
        connect_timeout=0.5,
        read_timeout=3.0,
        breaker_config=BreakerConfig(
            failure_threshold=7,
            window_seconds=30.0,
            recovery_timeout=12.5,
            half_open_max_probes=2,
            cache_ttl=0.0,
            failure_exceptions=(payment_module.PaymentProviderError,),
        ),
        open_circuit_mode="defer",
        deferred_queue_url="https://sqs.test/q",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"CIRCUIT_BREAKER_TABLE": ""}, "CIRCUIT_BREAKER_TABLE is required"),
        ({"PAYMENT_API_URL": "ftp://x"}, "PAYMENT_API_URL must be an http(s) URL"),
        ({"BREAKER_FAILURE_THRESHOLD": "2.5"}, "BREAKER_FAILURE_THRESHOLD must be a whole number"),
        ({"PAYMENT_READ_TIMEOUT": "0"}, "PAYMENT_READ_TIMEOUT must be > 0"),
        ({"BREAKER_CACHE_TTL": "-1"}, "BREAKER_CACHE_TTL: cache_ttl must be a non-negative"),
        ({"OPEN_CIRCUIT_MODE": "queue"}, "OPEN_CIRCUIT_MODE must be one of"),
        ({"OPEN_CIRCUIT_MODE": "defer"}, "needs DEFERRED_PAYMENTS_QUEUE_URL"),
    ],
)
def test_bad_settings_fail_at_init(
    payment_module: ModuleType, change: dict[str, str], message: str
) -> None:
    # A misconfigured function fails its init with the variable's name, not on a request.
    with pytest.raises(payment_module.SettingsError, match=re.escape(message)):
        payment_module.Settings.from_env({**BASE_ENV, **change})


def test_a_bad_payment_url_is_refused_without_its_password(payment_module: ModuleType) -> None:
    url = "ftp://shop:pa55word@pay.example.com/charge?token=t0k3n"

    with pytest.raises(payment_module.SettingsError) as refused:
        payment_module.Settings.from_env({**BASE_ENV, "PAYMENT_API_URL": url})

    assert "ftp://shop:***@pay.example.com/charge?token=***" in str(refused.value)
