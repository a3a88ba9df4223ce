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

Tests and local runs rebuild the handler with :func:`create_handler` (injected clock, local
AWS endpoint); in Lambda only the module-level ``handler`` is used.
"""

from __future__ import annotations

import binascii
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import requests
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths

from fleetbreaker import (
    Admission,
    BreakerConfig,
    CircuitBreaker,
    CircuitOpenError,
    ConfigError,
    State,
)
from fleetbreaker.config import env_number
from fleetbreaker.observability import default_listeners, log_metrics
from fleetbreaker.stores import from_env as stores_from_env

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_sqs.client import SQSClient

    from fleetbreaker.stores.base import Store

# Service name from POWERTOOLS_SERVICE_NAME (the template sets it), shared with the metrics.
logger = Logger()
tracer = Tracer()

MAX_AMOUNT = 100_000_000  # minor units: 1,000,000.00 in a two-decimal currency
CURRENCY = re.compile(r"[A-Z]{3}")
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:-]{1,255}")
MAX_DESCRIPTION = 500
FIELDS = {"amount", "currency", "idempotency_key", "description"}
OPEN_CIRCUIT_MODES = ("reject", "defer")


# --------------------------------------------------------------------------- settings


class SettingsError(ValueError):
    """An environment variable is missing or has an invalid value."""


def _text(env: Mapping[str, str], name: str, default: str | None = None) -> str:
    value = env.get(name, "").strip() or default
    if value is None:
        raise SettingsError(f"environment variable {name} is required")
    return value


def _breaker_config(env: Mapping[str, str]) -> BreakerConfig:
    try:
        # Only the provider's own trouble counts: a declined payment or a bug here must not
        # open the circuit for everyone.
        return BreakerConfig.from_env(env, failure_exceptions=(ProviderError,))
    except ConfigError as exc:
        raise SettingsError(str(exc)) from None


@dataclass(frozen=True)
class Settings:
    """Everything the function reads from its environment (see the README's reference)."""

    table_name: str
    payment_api_url: str
    breaker_name: str = "payment-api"
    connect_timeout: float = 1.0
    read_timeout: float = 5.0
    # BREAKER_* variables, read by BreakerConfig.from_env (the gate reads the same ones).
    breaker_config: BreakerConfig = field(default_factory=lambda: _breaker_config({}))
    open_circuit_mode: str = "reject"
    deferred_queue_url: str | None = None
    redis_url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        url = _text(env, "PAYMENT_API_URL")
        if not url.startswith(("https://", "http://")):
            raise SettingsError(f"PAYMENT_API_URL must be an http(s) URL, got {url!r}")
        mode = _text(env, "OPEN_CIRCUIT_MODE", "reject").lower()
        if mode not in OPEN_CIRCUIT_MODES:
            raise SettingsError(
                f"OPEN_CIRCUIT_MODE must be one of {OPEN_CIRCUIT_MODES}, got {mode!r}"
            )
        queue_url = env.get("DEFERRED_PAYMENTS_QUEUE_URL", "").strip() or None
        redis_url = env.get("CIRCUIT_BREAKER_REDIS_URL", "").strip() or None
        if redis_url is not None and not redis_url.startswith(("redis://", "rediss://")):
            raise SettingsError(
                f"CIRCUIT_BREAKER_REDIS_URL must be a redis:// or rediss:// URL, got {redis_url!r}"
            )
        if mode == "defer" and queue_url is None:
            raise SettingsError("OPEN_CIRCUIT_MODE=defer needs DEFERRED_PAYMENTS_QUEUE_URL")
        try:
            connect_timeout = env_number(env, "PAYMENT_CONNECT_TIMEOUT", 1.0)
            read_timeout = env_number(env, "PAYMENT_READ_TIMEOUT", 5.0)
        except ConfigError as exc:
            raise SettingsError(str(exc)) from None
        return cls(
            table_name=_text(env, "CIRCUIT_BREAKER_TABLE"),
            payment_api_url=url,
            breaker_name=_text(env, "BREAKER_NAME", "payment-api"),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            breaker_config=_breaker_config(env),
            open_circuit_mode=mode,
            deferred_queue_url=queue_url,
            # Set (by the template's BreakerStore=redis): the breaker lives in that cache.
            redis_url=redis_url,
        )


# --------------------------------------------------------------------------- request


class InvalidPayment(ValueError):
    """The request body is not a valid payment; ``errors`` says why, field by field."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("; ".join(errors))


@dataclass(frozen=True)
class PaymentRequest:
    """A validated payment: ``amount`` in minor units (1250 is 12.50 EUR)."""

    amount: int
    currency: str
    idempotency_key: str
    description: str | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "amount": self.amount,
            "currency": self.currency,
            "idempotency_key": self.idempotency_key,
        }
        if self.description is not None:
            body["description"] = self.description
        return body


def parse_payment(body: str | None) -> PaymentRequest:
    """Validate a request body; raises :class:`InvalidPayment` and nothing else."""
    if body is None or not body.strip():
        raise InvalidPayment(["body: a JSON object is required"])
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise InvalidPayment(["body: not valid JSON"]) from None
    if not isinstance(data, dict):
        raise InvalidPayment(["body: must be a JSON object"])

    errors = [f"{name}: unknown field" for name in sorted(set(data) - FIELDS)]
    amount = data.get("amount")
    if amount is None:
        errors.append("amount: required")
    elif isinstance(amount, bool) or not isinstance(amount, int):
        errors.append("amount: must be an integer number of minor units (1250 for 12.50)")
    elif not 0 < amount <= MAX_AMOUNT:
        errors.append(f"amount: must be between 1 and {MAX_AMOUNT}")
    currency = data.get("currency")
    if currency is None:
        errors.append("currency: required")
    elif not isinstance(currency, str) or not CURRENCY.fullmatch(currency):
        errors.append("currency: must be a three-letter ISO 4217 code in capitals, e.g. EUR")
    key = data.get("idempotency_key")
    if key is None:
        errors.append("idempotency_key: required")
    elif not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
        errors.append("idempotency_key: 1 to 255 characters of A-Z a-z 0-9 . _ : -")
    description = data.get("description")
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION
    ):
        errors.append(f"description: must be a string of at most {MAX_DESCRIPTION} characters")
    if errors:
        raise InvalidPayment(errors)
    # Each field was checked above; the casts only tell the type checker.
    return PaymentRequest(cast(int, amount), cast(str, currency), cast(str, key), description)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# --------------------------------------------------------------------------- provider


class ProviderError(Exception):
    """The payment API failed, timed out or was unreachable: the breaker counts it."""


class ProviderDeclined(Exception):
    """The payment API answered 4xx: it works, it refused this payment. Not counted."""

    def __init__(self, status: int, detail: Any) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"payment API refused the payment with HTTP {status}")


# Statuses that say the provider, not the request, is in trouble.
RETRYABLE_STATUSES = frozenset({408, 425, 429})


class PaymentProvider:
    """The external payment API, called with ``requests`` and bounded timeouts."""

    def __init__(
        self,
        url: str,
        connect_timeout: float,
        read_timeout: float,
        session: requests.Session | None = None,
    ) -> None:
        self.url = url
        # requests' read timeout bounds each socket read, not the whole response.
        self.timeout = (connect_timeout, read_timeout)
        self.session = session or requests.Session()

    def charge(self, payment: PaymentRequest) -> dict[str, Any]:
        try:
            response = self.session.post(
                self.url,
                json=payment.as_json(),
                # The provider deduplicates on this key, so a retried request cannot charge twice.
                headers={"Idempotency-Key": payment.idempotency_key},
                timeout=self.timeout,
                allow_redirects=False,
            )
        except requests.Timeout as exc:
            raise ProviderError(f"payment API timed out ({type(exc).__name__})") from exc
        except requests.RequestException as exc:
            raise ProviderError(f"payment API unreachable ({type(exc).__name__})") from exc
        status = response.status_code
        if 400 <= status < 500 and status not in RETRYABLE_STATUSES:
            raise ProviderDeclined(status, _json_or_text(response))
        if not 200 <= status < 300:
            raise ProviderError(f"payment API answered HTTP {status}")
        result = _json_or_text(response)
        if not isinstance(result, dict):
            raise ProviderError("payment API answered without a JSON object")
        return result


def _json_or_text(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:1000]


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
            raise CircuitOpenError(admission.name, admission.state, admission.retry_after) from exc
        return Deferred(sent["MessageId"], admission)


# --------------------------------------------------------------------------- handler


def _json(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(status, content_types.APPLICATION_JSON, body, headers)


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

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        return self.resolver.resolve(event, context)

    def create_payment(self) -> Response[Any]:
        payment = parse_payment(self._body())
        logger.append_keys(idempotency_key=payment.idempotency_key)
        try:
            result: dict[str, Any] | Deferred = self.breaker.call(self.provider.charge, payment)
        except CircuitOpenError as exc:
            return self.circuit_open(exc.name, exc.state, exc.retry_after)
        except ProviderError as exc:
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
                        f"is {admission.state.value}"
                    ),
                    "breaker": admission.name,
                    "state": admission.state.value,
                    "message_id": result.message_id,
                    "idempotency_key": payment.idempotency_key,
                },
            )
        return _json(200, {"idempotency_key": payment.idempotency_key, "result": result})

    def circuit_open(self, name: str, state: State, retry_after: float) -> Response[Any]:
        header = retry_after_header(retry_after)
        logger.info("payment rejected: circuit open", extra={"breaker": name, "state": state.value})
        return _json(
            503,
            {
                "message": (
                    f"payment provider circuit {name!r} is {state.value}; retry after {header} s"
                ),
                "breaker": name,
                "state": state.value,
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
                ["body: isBase64Encoded is set but the body is not base64 UTF-8"]
            ) from None


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
    environ = os.environ if env is None else env
    settings = Settings.from_env(environ)
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
    if store is None:
        store = stores_from_env(environ, endpoint_url=endpoint_url)
    breaker = CircuitBreaker(
        settings.breaker_name,
        store=store,
        config=settings.breaker_config,
        fallback=fallback,
        # Structured logs through this function's Logger, EMF metrics, X-Ray annotations.
        listeners=default_listeners(logger),
        clock=clock,
    )
    provider = PaymentProvider(
        settings.payment_api_url, settings.connect_timeout, settings.read_timeout
    )
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
