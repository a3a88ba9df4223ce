"""The breaker-guarded charge the example functions share: settings, provider client, breaker.

functions/payment (the HTTP API) and functions/deferred_payments (the queue consumer that
charges the payments the API deferred while the circuit was open) read the same environment
with :class:`Settings`, call the provider with the same :class:`PaymentProvider` and build the
same breaker with :func:`make_breaker`: a payment is charged the same way, through the same
fleet-wide breaker, whichever of them charges it. Each function's Makefile copies this file
beside its ``app.py``; tests put functions/shared on ``sys.path`` (devtools.functions).

Needs ``requests`` (the functions install it) and the layer (fleetbreaker); the charge step,
which has neither dependency, uses only ``payments.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import requests

from fleetbreaker import BreakerConfig, CircuitBreaker, ConfigError
from fleetbreaker.config import env_number
from fleetbreaker.redaction import redact_url
from fleetbreaker.stores import StoreSettings
from payments import (
    PaymentProviderError,
    PaymentRequest,
    connection_failed,
    read_answer,
    timed_out,
    unreachable,
)

if TYPE_CHECKING:
    from fleetbreaker.events import BreakerListener
    from fleetbreaker.stores.base import Store

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
        return BreakerConfig.from_env(env, failure_exceptions=(PaymentProviderError,))
    except ConfigError as exc:
        raise SettingsError(str(exc)) from None


@dataclass(frozen=True)
class Settings:
    """Everything the function reads from its environment (see the README's reference)."""

    # The store variables, read by the package's one reader (CIRCUIT_BREAKER_*: the table,
    # or the cache's URL and the IAM user to log in as).
    store: StoreSettings
    payment_api_url: str
    breaker_name: str = "payment-api"
    connect_timeout: float = 1.0
    read_timeout: float = 5.0
    # BREAKER_* variables, read by BreakerConfig.from_env (the gate reads the same ones).
    breaker_config: BreakerConfig = field(default_factory=lambda: _breaker_config({}))
    open_circuit_mode: str = "reject"
    deferred_queue_url: str | None = None

    @property
    def table_name(self) -> str | None:
        """The breakers' table (the store the environment names, when it is not Redis)."""
        return self.store.table_name

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        url = _text(env, "PAYMENT_API_URL")
        if not url.startswith(("https://", "http://")):
            raise SettingsError(f"PAYMENT_API_URL must be an http(s) URL, got {redact_url(url)!r}")
        mode = _text(env, "OPEN_CIRCUIT_MODE", "reject").lower()
        if mode not in OPEN_CIRCUIT_MODES:
            raise SettingsError(
                f"OPEN_CIRCUIT_MODE must be one of {OPEN_CIRCUIT_MODES}, got {mode!r}"
            )
        queue_url = env.get("DEFERRED_PAYMENTS_QUEUE_URL", "").strip() or None
        try:
            store = StoreSettings.from_env(env)
        except ConfigError as exc:
            raise SettingsError(str(exc)) from None
        if mode == "defer" and queue_url is None:
            raise SettingsError("OPEN_CIRCUIT_MODE=defer needs DEFERRED_PAYMENTS_QUEUE_URL")
        try:
            connect_timeout = env_number(env, "PAYMENT_CONNECT_TIMEOUT", 1.0)
            read_timeout = env_number(env, "PAYMENT_READ_TIMEOUT", 5.0)
        except ConfigError as exc:
            raise SettingsError(str(exc)) from None
        return cls(
            store=store,
            payment_api_url=url,
            breaker_name=_text(env, "BREAKER_NAME", "payment-api"),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            breaker_config=_breaker_config(env),
            open_circuit_mode=mode,
            deferred_queue_url=queue_url,
        )


# --------------------------------------------------------------------------- provider


class ProviderDeclined(Exception):
    """The payment API answered 4xx: it works, it refused this payment. Not counted."""

    def __init__(self, status: int, detail: Any) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"payment API refused the payment with HTTP {status}")


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
            raw = response.content
        except requests.ConnectTimeout as exc:
            raise timed_out("connect") from exc
        except requests.Timeout as exc:
            raise timed_out("read") from exc
        except requests.ConnectionError as exc:
            raise unreachable(exc) from exc
        except requests.RequestException as exc:
            raise connection_failed(exc) from exc
        answer = read_answer(response.status_code, raw)
        if not answer.charged:
            raise ProviderDeclined(answer.status, answer.detail)
        result: dict[str, Any] = answer.detail
        return result


# --------------------------------------------------------------------------- breaker


def make_breaker(
    settings: Settings,
    *,
    store: Store | None = None,
    fallback: Callable[..., Any] | None = None,
    listeners: Iterable[BreakerListener] | None = None,
    clock: Callable[[], int] | None = None,
    endpoint_url: str | None = None,
) -> CircuitBreaker:
    """The payment breaker ``settings`` names, on the store they name.

    ``store`` replaces that store (e.g. a ``MemoryStore`` for a per-container breaker);
    ``endpoint_url`` is a local DynamoDB endpoint (moto) for tests and local runs.
    """
    if store is None:
        # The package's one store factory, on everything it read: the cache's IAM login too.
        store = settings.store.open(endpoint_url=endpoint_url)
    return CircuitBreaker(
        settings.breaker_name,
        store=store,
        config=settings.breaker_config,
        fallback=fallback,
        listeners=listeners,
        clock=clock,
    )


def make_provider(settings: Settings) -> PaymentProvider:
    """The payment API client ``settings`` describe."""
    return PaymentProvider(
        settings.payment_api_url, settings.connect_timeout, settings.read_timeout
    )
