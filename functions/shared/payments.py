"""The example functions' one payment module: a payment's fields, and what a provider answer means.

Both functions/payment (the HTTP API) and functions/charge (the workflow's step) validate a
payment with :func:`validate_payment` and read the provider's answer with
:func:`read_answer`, so a payment valid for one is valid for the other and both word every
problem the same way. Each function's Makefile copies this file beside its ``app.py``
(``import payments`` in Lambda); tests put this folder on ``sys.path`` (devtools.functions).

Only the standard library: the charge function has no dependency beyond the layer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_AMOUNT = 100_000_000  # minor units: 1,000,000.00 in a two-decimal currency
CURRENCY = re.compile(r"[A-Z]{3}")
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:-]{1,255}")
MAX_DESCRIPTION = 500
FIELDS = frozenset({"amount", "currency", "idempotency_key", "description"})
# Statuses that say the provider, not the payment, is in trouble.
PROVIDER_TROUBLE = frozenset({408, 425, 429})

# Error detail is bounded: a body of a million unknown fields must not produce an answer
# larger than Lambda's 6 MB response limit (API Gateway would turn it into a 500).
MAX_LISTED_FIELDS = 10
MAX_SHOWN_CHARACTERS = 64
# What is kept of a provider answer that is not JSON.
MAX_PROVIDER_TEXT = 1000


class InvalidPayment(ValueError):
    """The payment is not valid; ``errors`` names each problem as ``field: rule``."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("; ".join(errors))


class PaymentProviderError(Exception):
    """The payment API failed, timed out or was unreachable: a failure of the provider."""


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


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut to a bounded length."""
    if len(text) <= MAX_SHOWN_CHARACTERS:
        return repr(text)
    return f"{text[:MAX_SHOWN_CHARACTERS]!r}... ({len(text)} characters)"


def unknown_field_errors(names: set[str]) -> list[str]:
    """One error per unknown field, at most :data:`MAX_LISTED_FIELDS`, then how many more."""
    ordered = sorted(names)
    errors = [f"{shown(name)}: unknown field" for name in ordered[:MAX_LISTED_FIELDS]]
    if len(ordered) > MAX_LISTED_FIELDS:
        errors.append(f"... and {len(ordered) - MAX_LISTED_FIELDS} more unknown fields")
    return errors


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def validate_payment(data: object, source: str = "body") -> PaymentRequest:
    """Check a decoded payment; raises :class:`InvalidPayment` naming every bad field.

    Parameters
    ----------
    data:
        The decoded JSON (a request body, or a workflow's input).
    source:
        What ``data`` is, for the error when it is not a JSON object.

    Example
    -------
    >>> validate_payment({"amount": 1250, "currency": "EUR", "idempotency_key": "o-1"})
    PaymentRequest(amount=1250, currency='EUR', idempotency_key='o-1', description=None)
    """
    if not isinstance(data, Mapping):
        raise InvalidPayment([f"{source}: must be a JSON object, got {json_type(data)}"])
    errors = unknown_field_errors(set(data) - FIELDS)
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
        errors.append("idempotency_key: must be 1 to 255 characters of A-Z a-z 0-9 . _ : -")
    description = data.get("description")
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION
    ):
        errors.append(f"description: must be a string of at most {MAX_DESCRIPTION} characters")
    if errors:
        raise InvalidPayment(errors)
    # Each field was checked above: these are the validated values.
    assert isinstance(amount, int)
    assert isinstance(currency, str)
    assert isinstance(key, str)
    return PaymentRequest(amount, currency, key, description)


def parse_payment(body: str | None) -> PaymentRequest:
    """Validate a JSON text; raises :class:`InvalidPayment` and nothing else."""
    if body is None or not body.strip():
        raise InvalidPayment(["body: a JSON object is required"])
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise InvalidPayment(["body: not valid JSON"]) from None
    return validate_payment(data)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# --------------------------------------------------------------------------- provider answers


@dataclass(frozen=True)
class ProviderAnswer:
    """The provider answered: ``charged`` (2xx with a JSON object) or ``declined`` (4xx).

    A decline means the provider works and refused this payment: not a provider failure.
    """

    outcome: str
    status: int
    detail: Any

    @property
    def charged(self) -> bool:
        return self.outcome == "charged"


def provider_detail(raw: bytes) -> Any:
    """The provider's body: its JSON, else the start of its text (None when empty)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw[:MAX_PROVIDER_TEXT].decode("utf-8", "replace")


def read_answer(status: int, raw: bytes) -> ProviderAnswer:
    """What an HTTP answer of the payment API means; raises :class:`PaymentProviderError`
    when it says the provider is in trouble (5xx, 408/425/429, or a success without a JSON
    object)."""
    detail = provider_detail(raw)
    if 400 <= status < 500 and status not in PROVIDER_TROUBLE:
        return ProviderAnswer("declined", status, detail)
    if not 200 <= status < 300:
        raise PaymentProviderError(f"payment API answered HTTP {status}")
    if not isinstance(detail, dict):
        raise PaymentProviderError(f"payment API answered HTTP {status} without a JSON object")
    return ProviderAnswer("charged", status, detail)


# One wording for each way of not getting an answer, whichever HTTP client a function uses.


def timed_out(phase: str) -> PaymentProviderError:
    """``phase`` is ``connect`` or ``read``."""
    return PaymentProviderError(f"payment API: {phase} timed out")


def unreachable(exc: BaseException) -> PaymentProviderError:
    return PaymentProviderError(f"payment API unreachable ({type(exc).__name__})")


def connection_failed(exc: BaseException) -> PaymentProviderError:
    return PaymentProviderError(f"payment API: connection failed ({type(exc).__name__})")
