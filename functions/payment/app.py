"""Payment API (``POST /payments``): validates a payment and charges it through the fleet's breaker.

One breaker per container, built at import from the environment (see ``Settings``), so every
warm container of every function naming the same breaker shares one state in DynamoDB (or in
Redis, when ``CIRCUIT_BREAKER_REDIS_URL`` is set).

Responses
---------
200  the provider charged the payment; its result is returned.
400  the request body is not a valid payment (never a 500).
422  the provider answered but refused the payment (4xx): not a provider failure.
502  the provider failed, timed out or was unreachable: counted by the breaker.
503  the breaker is open: the provider is not called; ``Retry-After`` says when to try again.
202  instead of 503 when ``OPEN_CIRCUIT_MODE=defer``: the payment went to an SQS queue for
     later processing (if that enqueue fails, the answer is the 503).

Validation and the reading of the provider's answers live in ``payments.py``
(functions/shared), which the charge step uses too; the settings, the provider client and the
breaker live in ``charging.py`` (functions/shared), which the deferred-payments consumer uses
too. The Makefile copies both beside this file.

Tests and local runs rebuild the handler with :func:`create_handler` (injected clock, local
AWS endpoint); in Lambda only the module-level ``handler`` is used.
"""

from __future__ import annotations

import binascii
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths

from breaker_events import transition_listeners
from charging import (
    OPEN_CIRCUIT_MODES,
    PaymentProvider,
    ProviderDeclined,
    Settings,
    SettingsError,
    make_breaker,
    make_provider,
)
from fleetbreaker import Admission, CircuitBreaker, CircuitOpenError, State
from fleetbreaker.observability import default_listeners, log_metrics
from payments import (
    InvalidPayment,
    PaymentProviderError,
    PaymentRequest,
    json_type,
    parse_payment,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_sqs.client import SQSClient

    from fleetbreaker.stores.base import Store

# The payment function's names from the shared modules, for tests and tools that use them
# through this module.
__all__ = [
    "OPEN_CIRCUIT_MODES",
    "PaymentProvider",
    "PaymentProviderError",
    "ProviderDeclined",
    "Settings",
    "SettingsError",
    "create_handler",
    "handler",
    "lambda_handler",
]

# Service name from POWERTOOLS_SERVICE_NAME (the template sets it), shared with the metrics.
logger = Logger()
tracer = Tracer()

# --------------------------------------------------------------------------- open circuit


@dataclass(frozen=True)
class Deferred:
    """A payment queued for later because the circuit was open."""

    message_id: str
    admission: Admission


class DeferredPayments:
    """The ``defer`` fallback: queue the payment in SQS instead of answering 503."""

    def __init__(self, queue_url: str, client: SQSClient) -> None:
        self.queue_url = queue_url
        self.client = client

    def __call__(self, admission: Admission, payment: PaymentRequest) -> Deferred:
        try:
            sent = self.client.send_message(
                QueueUrl=self.queue_url,
                MessageBody=json.dumps(payment.as_json()),
                MessageAttributes={
                    "breaker": {"DataType": "String", "StringValue": admission.name},
                    "state": {"DataType": "String", "StringValue": admission.state.value},
                },
            )
        except Exception as exc:
            # Accepting a payment we could not store would lose it: answer the 503 instead.
            logger.exception("could not defer payment", extra={"queue_url": self.queue_url})
            raise CircuitOpenError(
                admission.name, admission.state, admission.retry_after_s
            ) from exc
        return Deferred(sent["MessageId"], admission)


# --------------------------------------------------------------------------- handler


def _json(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(status, content_types.APPLICATION_JSON, body, headers)


def event_shape_errors(event: object) -> list[str]:
    """What keeps ``event`` from being an HTTP API (payload 2.0) event; empty when it is one.

    Only what the resolver reads is checked: the method, the path, the headers and the body.
    """
    if not isinstance(event, dict):
        return [f"event: must be a JSON object (an HTTP API event), got {json_type(event)}"]
    errors = []
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, dict) else None
    if not isinstance(context, dict):
        errors.append(f"requestContext: must be an object, got {json_type(context)}")
    elif not isinstance(http, dict) or not isinstance(http.get("method"), str):
        errors.append("requestContext.http.method: required, a string")
    if not isinstance(event.get("rawPath"), str):
        errors.append(f"rawPath: must be a string, got {json_type(event.get('rawPath'))}")
    headers = event.get("headers")
    if headers is not None and not (
        isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values())
    ):
        errors.append("headers: must be an object of strings")
    body = event.get("body")
    if body is not None and not isinstance(body, str):
        errors.append(f"body: must be a string or null, got {json_type(body)}")
    encoded = event.get("isBase64Encoded", False)
    if not isinstance(encoded, bool):
        errors.append(f"isBase64Encoded: must be true or false, got {json_type(encoded)}")
    return errors


def retry_after_header(seconds: float) -> str:
    """Retry-After takes whole seconds; round up so a client never comes back too early."""
    return str(max(1, math.ceil(seconds)))


class PaymentHandler:
    """The HTTP API handler: routes ``POST /payments`` through validation and the breaker."""

    def __init__(self, settings: Settings, breaker: CircuitBreaker, provider: PaymentProvider):
        self.settings = settings
        self.breaker = breaker
        self.provider = provider
        self.resolver = APIGatewayHttpResolver()
        self.resolver.post("/payments")(self.create_payment)
        self.resolver.exception_handler(InvalidPayment)(self.invalid_payment)

    def __call__(self, event: object, context: Any) -> dict[str, Any]:
        problems = event_shape_errors(event)
        if problems:
            # Not an HTTP API request (a direct invoke, a test tool, another trigger): answer
            # instead of failing with a KeyError deep in the resolver.
            logger.info("not an HTTP API event", extra={"errors": problems})
            return {
                "statusCode": 400,
                "headers": {"Content-Type": content_types.APPLICATION_JSON},
                "body": json.dumps(
                    {"message": "not an API Gateway HTTP API request", "errors": problems}
                ),
            }
        assert isinstance(event, dict)  # event_shape_errors checked it
        return self.resolver.resolve(event, context)

    def create_payment(self) -> Response[Any]:
        payment = parse_payment(self._body())
        logger.append_keys(idempotency_key=payment.idempotency_key)
        try:
            result: dict[str, Any] | Deferred = self.breaker.call(self.provider.charge, payment)
        except CircuitOpenError as exc:
            return self.circuit_open(exc.name, exc.state, exc.retry_after)
        except PaymentProviderError as exc:
            logger.warning("payment provider failed", extra={"error": str(exc)})
            return _json(
                502,
                {
                    "message": f"payment provider failed: {exc}",
                    "breaker": self.breaker.name,
                    "idempotency_key": payment.idempotency_key,
                },
            )
        except ProviderDeclined as exc:
            logger.info("payment declined by provider", extra={"provider_status": exc.status})
            return _json(
                422,
                {
                    "message": str(exc),
                    "provider_status": exc.status,
                    "provider_response": exc.detail,
                    "idempotency_key": payment.idempotency_key,
                },
            )
        if isinstance(result, Deferred):
            admission = result.admission
            logger.info("payment deferred: circuit open", extra={"message_id": result.message_id})
            return _json(
                202,
                {
                    "message": (
                        f"payment accepted for later processing: circuit {admission.name!r} "
                        f"is {_condition(admission.state)}"
                    ),
                    "breaker": admission.name,
                    "state": admission.state.value,
                    "recovering": admission.state is State.CLOSED,
                    "message_id": result.message_id,
                    "idempotency_key": payment.idempotency_key,
                },
            )
        return _json(200, {"idempotency_key": payment.idempotency_key, "result": result})

    def circuit_open(self, name: str, state: State, retry_after: float) -> Response[Any]:
        header = retry_after_header(retry_after)
        recovering = state is State.CLOSED
        logger.info(
            f"payment rejected: circuit {'recovering' if recovering else 'open'}",
            extra={"breaker": name, "state": state.value},
        )
        condition = _condition(state)
        return _json(
            503,
            {
                "message": (
                    f"payment provider circuit {name!r} is {condition}; retry after {header} s"
                ),
                "breaker": name,
                "state": state.value,
                "recovering": recovering,
                "retry_after": int(header),
            },
            {"Retry-After": header},
        )

    def invalid_payment(self, exc: InvalidPayment) -> Response[Any]:
        logger.info("invalid payment request", extra={"errors": exc.errors})
        return _json(400, {"message": "invalid payment request", "errors": exc.errors})

    def _body(self) -> str | None:
        try:
            return self.resolver.current_event.decoded_body
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise InvalidPayment(
                ["body: isBase64Encoded is true but the body is not base64-encoded UTF-8"]
            ) from None


def _condition(state: State) -> str:
    """The breaker's condition as a turned-away caller should read it.

    A closed breaker turns a call away only during its recovery ramp: a 503 (or a deferral)
    saying "circuit is closed" would read as a contradiction.
    """
    if state is State.CLOSED:
        return "recovering (it admits a growing share of payments)"
    return str(state.value)


def create_handler(
    env: Mapping[str, str] | None = None,
    *,
    clock: Callable[[], int] | None = None,
    endpoint_url: str | None = None,
    store: Store | None = None,
) -> PaymentHandler:
    """Build the handler, its breaker and clients from environment variables.

    Parameters
    ----------
    env:
        The variables to read (default ``os.environ``).
    clock:
        Epoch-millisecond clock for the breaker (tests move time by hand).
    endpoint_url:
        A local AWS endpoint (moto) for DynamoDB and SQS. Without it boto3 resolves endpoints
        itself, which honours ``AWS_ENDPOINT_URL_DYNAMODB`` and ``AWS_ENDPOINT_URL_SQS``.
    store:
        The breaker's store instead of the one the environment names (Redis at
        ``CIRCUIT_BREAKER_REDIS_URL``, else DynamoDB), e.g. a ``MemoryStore`` for a
        per-container breaker (``make demo`` compares the two).
    """
    env = os.environ if env is None else env
    settings = Settings.from_env(env)
    fallback: DeferredPayments | None = None
    if settings.open_circuit_mode == "defer":
        import boto3
        from botocore.config import Config

        assert settings.deferred_queue_url is not None  # from_env checked it
        sqs = boto3.session.Session().client(
            "sqs",
            endpoint_url=endpoint_url,
            # A rejected call must stay fast: bounded wait, one retry.
            config=Config(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 2}),
        )
        fallback = DeferredPayments(settings.deferred_queue_url, sqs)
    breaker = make_breaker(
        settings,
        store=store,
        fallback=fallback,
        # Structured logs through this function's Logger, EMF metrics, X-Ray annotations.
        listeners=default_listeners(
            logger, extra=transition_listeners(env, endpoint_url=endpoint_url)
        ),
        clock=clock,
        endpoint_url=endpoint_url,
    )
    provider = make_provider(settings)
    return PaymentHandler(settings, breaker, provider)


# One handler per container, built during init.
handler = create_handler()


# Payment results stay out of X-Ray metadata; keys appended for one request (the idempotency
# key) must not leak into the next request's logs in a warm container.
@tracer.capture_lambda_handler(capture_response=False)
@log_metrics  # writes the breaker's metrics (EMF) once per invocation
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True
)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handler(event, context)
