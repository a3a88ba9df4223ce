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

Validation and the reading of the provider's answers are the payment function's own
(``payments.py`` from functions/shared, which the Makefile copies beside this file). Only the
standard library otherwise: no dependency but the layer's Powertools (for structured logs) and
its ``config.env_number`` (the one reader of numeric settings).
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aws_lambda_powertools import Logger

# The config module only (no breaker: the workflow counts outcomes through the gate), and the
# redaction of a URL that may carry the provider's key.
from fleetbreaker import config as layer_config
from fleetbreaker import redaction
from payments import (
    InvalidPayment,
    PaymentProviderError,
    PaymentRequest,
    connection_failed,
    read_answer,
    timed_out,
    unreachable,
    validate_payment,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service="charge")

MAX_RESPONSE_BYTES = 1 << 20


class InvalidPaymentRequest(ValueError):
    """The step's input is not a valid payment; nothing was sent to the provider."""


# PaymentProviderError (payments.py): the provider failed, timed out or was unreachable; the
# workflow records a failure. Its name is the Lambda error type the workflow sees.


class ChargeConfigError(ValueError):
    """An environment variable of the charge function is missing or invalid."""


# --------------------------------------------------------------------------- settings


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    # The layer's reader of numeric settings (a ConfigError, a ValueError, names the variable).
    try:
        return float(layer_config.env_number(env, name, default))
    except ValueError as exc:
        raise ChargeConfigError(str(exc)) from None


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
            raise ChargeConfigError(
                f"PAYMENT_API_URL must be an http(s) URL, got {redaction.redact_url(url)!r}"
            )
        return cls(
            url,
            _seconds(env, "PAYMENT_CONNECT_TIMEOUT", 1.0),
            _seconds(env, "PAYMENT_READ_TIMEOUT", 5.0),
        )


# --------------------------------------------------------------------------- input


def parse_payment(event: object) -> PaymentRequest:
    """The payment to send; raises :class:`InvalidPaymentRequest` naming every bad field."""
    try:
        return validate_payment(event, source="input")
    except InvalidPayment as exc:
        raise InvalidPaymentRequest(str(exc)) from None


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

    def charge(self, payment: PaymentRequest) -> dict[str, Any]:
        body = json.dumps(payment.as_json()).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Idempotency-Key": payment.idempotency_key,
        }
        conn = self._connection()
        try:
            try:
                conn.connect()
            except TimeoutError as exc:
                raise timed_out("connect") from exc
            except OSError as exc:
                raise unreachable(exc) from exc
            assert conn.sock is not None
            conn.sock.settimeout(self.settings.read_timeout)
            try:
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                raw = response.read(MAX_RESPONSE_BYTES)
            except TimeoutError as exc:
                raise timed_out("read") from exc
            except (OSError, http.client.HTTPException) as exc:
                raise connection_failed(exc) from exc
        finally:
            conn.close()
        answer = read_answer(response.status, raw)
        return {
            "status": answer.outcome,
            "idempotency_key": payment.idempotency_key,
            "provider_status": answer.status,
            "provider_response": answer.detail,
        }

    def _connection(self) -> http.client.HTTPConnection:
        timeout = self.settings.connect_timeout
        if self._tls is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self._tls
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


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
    logger.append_keys(idempotency_key=payment.idempotency_key)
    try:
        result = current_api().charge(payment)
    except PaymentProviderError as exc:
        logger.warning("payment provider failed", extra={"error": str(exc)})
        raise
    logger.info("payment answered", extra={"status": result["status"]})
    return result
