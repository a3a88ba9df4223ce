"""Charge step of the payment workflow: one POST to the payment API, with no breaker of its own.

The workflow (statemachine/payment.asl.json) asks the breaker gate before this step and
records the outcome through the gate afterwards. A breaker in here, named like the gate's,
would count every failure a second time, so this function only reports what happened: it
returns when the provider answered (charged or declined) and raises when it did not.

Input (the workflow's input, as the payment API's body)
    ``{"amount": 1250, "currency": "EUR", "idempotency_key": "order-1042", "description": "..."}``;
    ``amount`` is in minor units (1250 is 12.50 EUR).
Output
    ``{"status": "charged" | "declined", "idempotency_key", "provider_status",
    "provider_response"}``. A decline (HTTP 4xx) means the provider works and refused this
    payment: the breaker counts it as a success.
Errors (the Lambda error type is the class name; the workflow catches them by it)
    :class:`InvalidPaymentRequest` before anything is sent; :class:`PaymentProviderError` when
    the provider failed, timed out, was unreachable or answered 408/425/429/5xx.

The provider deduplicates on the ``Idempotency-Key`` header, so the workflow's retries of this
step (on Lambda service errors) cannot charge twice.

Environment: ``PAYMENT_API_URL`` (required, http(s)), ``PAYMENT_CONNECT_TIMEOUT`` (1 s),
``PAYMENT_READ_TIMEOUT`` (5 s, per socket read).

Only the standard library: the function needs no build step and no dependency but the layer's
Powertools (for structured logs).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aws_lambda_powertools import Logger

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service="charge")

MAX_AMOUNT = 100_000_000
CURRENCY = re.compile(r"[A-Z]{3}")
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:-]{1,255}")
MAX_DESCRIPTION = 500
FIELDS = {"amount", "currency", "idempotency_key", "description"}
# Statuses that say the provider, not the payment, is in trouble.
PROVIDER_TROUBLE = frozenset({408, 425, 429})
MAX_RESPONSE_BYTES = 1 << 20


class InvalidPaymentRequest(ValueError):
    """The step's input is not a valid payment; nothing was sent to the provider."""


class PaymentProviderError(Exception):
    """The provider failed, timed out or was unreachable: the workflow records a failure."""


class ChargeConfigError(ValueError):
    """An environment variable of the charge function is missing or invalid."""


# --------------------------------------------------------------------------- settings


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ChargeConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ChargeConfigError(f"{name} must be > 0, got {raw!r}")
    return value


@dataclass(frozen=True)
class ChargeSettings:
    """Everything the function reads from its environment."""

    payment_api_url: str
    connect_timeout: float = 1.0
    read_timeout: float = 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ChargeSettings:
        url = env.get("PAYMENT_API_URL", "").strip()
        if not url:
            raise ChargeConfigError("environment variable PAYMENT_API_URL is required")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ChargeConfigError(f"PAYMENT_API_URL must be an http(s) URL, got {url!r}")
        return cls(
            url,
            _seconds(env, "PAYMENT_CONNECT_TIMEOUT", 1.0),
            _seconds(env, "PAYMENT_READ_TIMEOUT", 5.0),
        )


# --------------------------------------------------------------------------- input


def parse_payment(event: object) -> dict[str, Any]:
    """The payment to send; raises :class:`InvalidPaymentRequest` naming every bad field."""
    if not isinstance(event, Mapping):
        raise InvalidPaymentRequest(f"the input must be a JSON object, got {type(event).__name__}")
    errors = [f"{name}: unknown field" for name in sorted(set(event) - FIELDS)]
    amount = event.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int):
        errors.append("amount: required, an integer number of minor units (1250 for 12.50)")
    elif not 0 < amount <= MAX_AMOUNT:
        errors.append(f"amount: must be between 1 and {MAX_AMOUNT}")
    currency = event.get("currency")
    if not isinstance(currency, str) or not CURRENCY.fullmatch(currency):
        errors.append("currency: required, a three-letter ISO 4217 code in capitals, e.g. EUR")
    key = event.get("idempotency_key")
    if not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
        errors.append("idempotency_key: required, 1 to 255 characters of A-Z a-z 0-9 . _ : -")
    description = event.get("description")
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION
    ):
        errors.append(f"description: must be a string of at most {MAX_DESCRIPTION} characters")
    if errors:
        raise InvalidPaymentRequest("; ".join(errors))
    return {name: event[name] for name in sorted(FIELDS) if event.get(name) is not None}


# --------------------------------------------------------------------------- provider


class PaymentApi:
    """The external payment API over ``http.client``, with separate connect and read timeouts."""

    def __init__(self, settings: ChargeSettings) -> None:
        self.settings = settings
        parts = urlsplit(settings.payment_api_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._tls = ssl.create_default_context() if self.https else None

    def charge(self, payment: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(payment).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Idempotency-Key": payment["idempotency_key"],
        }
        conn = self._connection()
        try:
            try:
                conn.connect()
            except TimeoutError as exc:
                raise PaymentProviderError("payment API: connect timed out") from exc
            except OSError as exc:
                raise PaymentProviderError(f"payment API unreachable: {exc}") from exc
            assert conn.sock is not None
            conn.sock.settimeout(self.settings.read_timeout)
            try:
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                raw = response.read(MAX_RESPONSE_BYTES)
            except TimeoutError as exc:
                raise PaymentProviderError("payment API: read timed out") from exc
            except (OSError, http.client.HTTPException) as exc:
                raise PaymentProviderError(
                    f"payment API: connection failed ({type(exc).__name__})"
                ) from exc
        finally:
            conn.close()
        return self._result(payment, response.status, raw)

    def _connection(self) -> http.client.HTTPConnection:
        timeout = self.settings.connect_timeout
        if self._tls is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self._tls
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    @staticmethod
    def _result(payment: dict[str, Any], status: int, raw: bytes) -> dict[str, Any]:
        try:
            detail: Any = json.loads(raw) if raw else None
        except ValueError:
            detail = raw[:1000].decode("utf-8", "replace")
        if status >= 500 or status in PROVIDER_TROUBLE:
            raise PaymentProviderError(f"payment API answered HTTP {status}")
        if 400 <= status < 500:
            outcome = "declined"
        elif 200 <= status < 300 and isinstance(detail, dict):
            outcome = "charged"
        else:
            raise PaymentProviderError(f"payment API answered HTTP {status} without a JSON object")
        return {
            "status": outcome,
            "idempotency_key": payment["idempotency_key"],
            "provider_status": status,
            "provider_response": detail,
        }


# --------------------------------------------------------------------------- handler

# The container's client: built by the first invocation (tests assign their own).
api: PaymentApi | None = None
_api_lock = threading.Lock()


def current_api() -> PaymentApi:
    global api
    with _api_lock:
        if api is None:
            api = PaymentApi(ChargeSettings.from_env(os.environ))
        return api


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    payment = parse_payment(event)
    logger.append_keys(idempotency_key=payment["idempotency_key"])
    try:
        result = current_api().charge(payment)
    except PaymentProviderError as exc:
        logger.warning("payment provider failed", extra={"error": str(exc)})
        raise
    logger.info("payment answered", extra={"status": result["status"]})
    return result
