"""Deferred-payments consumer: charges, once, the payments the API queued while it was open.

With ``OPEN_CIRCUIT_MODE=defer`` the payment API answers 202 and sends the payment to
DeferredPaymentsQueue instead of answering 503. This function reads that queue through an SQS
event source mapping (``ReportBatchItemFailures``) and charges each payment with the API's own
code (``charging.py``) through the API's own fleet-wide breaker, so a consumer draining the
queue trips and respects the same circuit as the API's traffic.

Per message
-----------
charged   the provider charged it: the message is deleted.
declined  the provider answered and refused it (4xx): final, the message is deleted (logged).
failure   the circuit is open (the breaker rejected the charge), the provider failed, or the
          message is not a valid payment: the message is reported in ``batchItemFailures`` and
          comes back after its visibility timeout; after the queue's ``maxReceiveCount``
          receives it goes to the dead-letter queue. Nothing is lost.

Exactly once: the charge runs inside Powertools' idempotency utility keyed by the payment's
``idempotency_key`` (its own DynamoDB table, ``IDEMPOTENCY_TABLE``). A redelivered message, or
the same payment deferred twice by a retrying client, returns the stored outcome without
calling the provider; a charge that raised (open circuit, provider failure) leaves no record,
so the next delivery charges it. The same key with another amount or currency is refused. The
provider's own ``Idempotency-Key`` header covers the remaining gap (a container killed between
the provider's answer and the idempotency record's completion).

While the breaker is open the breaker-events function disables this function's event source
mapping, so the queue is not polled in vain; the mapping is enabled again when it closes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from breaker_events import transition_listeners
from charging import (
    PaymentProvider,
    ProviderDeclined,
    Settings,
    SettingsError,
    make_breaker,
    make_provider,
)
from fleetbreaker import CircuitBreaker, ConfigError
from fleetbreaker.config import env_number
from fleetbreaker.observability import default_listeners, log_metrics
from payments import parse_payment, validate_payment

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from fleetbreaker.stores.base import Store

logger = Logger()
tracer = Tracer()

# The idempotency records are named by this prefix and the key's hash, not by the Python
# function's qualified name (Powertools' default), so renaming code cannot re-charge anything.
KEY_PREFIX = "deferred-payment"
# A deferred payment may wait in the queue for its full retention (14 days), and a client
# retrying a 202 may defer the same payment again within that time: remember a charge longer.
DEFAULT_IDEMPOTENCY_SECONDS = 15 * 24 * 3600


@dataclass(frozen=True)
class ConsumerSettings:
    """The payment settings (shared with the API) plus the idempotency table."""

    payment: Settings
    idempotency_table: str
    idempotency_seconds: int = DEFAULT_IDEMPOTENCY_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConsumerSettings:
        table = env.get("IDEMPOTENCY_TABLE", "").strip()
        if not table:
            raise SettingsError("environment variable IDEMPOTENCY_TABLE is required")
        try:
            seconds = env_number(
                env, "IDEMPOTENCY_EXPIRY_SECONDS", DEFAULT_IDEMPOTENCY_SECONDS, int
            )
        except ConfigError as exc:
            raise SettingsError(str(exc)) from None
        return cls(Settings.from_env(env), table, seconds)


class DeferredPaymentConsumer:
    """Charges each SQS record's payment once, through the breaker; reports the failures."""

    def __init__(
        self,
        breaker: CircuitBreaker,
        provider: PaymentProvider,
        persistence: DynamoDBPersistenceLayer,
        idempotency: IdempotencyConfig,
    ) -> None:
        self.breaker = breaker
        self.provider = provider
        self.idempotency = idempotency
        # The whole batch may fail (the circuit is open): report every record instead of
        # raising, so the invocation is not counted as a function error.
        self.processor = BatchProcessor(EventType.SQS, raise_on_entire_batch_failure=False)
        self.charge_once: Callable[..., dict[str, Any]] = idempotent_function(
            self._charge,
            data_keyword_argument="payment",
            persistence_store=persistence,
            config=idempotency,
            key_prefix=KEY_PREFIX,
        )

    def __call__(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        # In-progress idempotency records expire with this invocation's remaining time, so a
        # container killed mid-charge does not block the payment's next delivery for long.
        self.idempotency.register_lambda_context(context)
        response = process_partial_response(event, self.handle_record, self.processor, context)
        return dict(response)

    def handle_record(self, record: SQSRecord) -> dict[str, Any]:
        # A body that is not a valid payment raises InvalidPayment: a failure, so the message
        # ends in the dead-letter queue instead of vanishing.
        payment = parse_payment(record.body)
        logger.append_keys(idempotency_key=payment.idempotency_key)
        try:
            outcome = self.charge_once(payment=payment.as_json())
        except Exception as exc:
            logger.warning(
                "deferred payment not charged: it goes back to the queue",
                extra={"message_id": record.message_id, "error": str(exc)},
            )
            raise
        finally:
            logger.remove_keys(["idempotency_key"])
        logger.info(
            f"deferred payment {outcome['outcome']}", extra={"message_id": record.message_id}
        )
        return outcome

    def _charge(self, payment: dict[str, Any]) -> dict[str, Any]:
        request = validate_payment(payment)
        try:
            # CircuitOpenError (open circuit) and PaymentProviderError propagate: the record
            # fails, and the idempotency utility forgets the attempt.
            result = self.breaker.call(self.provider.charge, request)
        except ProviderDeclined as exc:
            # The provider works and refused this payment: retrying cannot change that.
            return {"outcome": "declined", "provider_status": exc.status, "detail": exc.detail}
        return {"outcome": "charged", "result": result}


def create_consumer(
    env: Mapping[str, str] | None = None,
    *,
    clock: Callable[[], int] | None = None,
    endpoint_url: str | None = None,
    store: Store | None = None,
) -> DeferredPaymentConsumer:
    """Build the consumer, its breaker and clients from environment variables.

    Parameters
    ----------
    env:
        The variables to read (default ``os.environ``): the payment function's, plus
        ``IDEMPOTENCY_TABLE`` (and optionally ``IDEMPOTENCY_EXPIRY_SECONDS``).
    clock:
        Epoch-millisecond clock for the breaker (tests move time by hand).
    endpoint_url:
        A local AWS endpoint (moto) for DynamoDB.
    store:
        The breaker's store instead of the one the environment names.
    """
    env = os.environ if env is None else env
    settings = ConsumerSettings.from_env(env)
    breaker = make_breaker(
        settings.payment,
        store=store,
        # Structured logs, EMF metrics, X-Ray; and, with the Redis store, the listener that
        # pauses and resumes consumers on this container's transitions.
        listeners=default_listeners(
            logger, extra=transition_listeners(env, endpoint_url=endpoint_url)
        ),
        clock=clock,
        endpoint_url=endpoint_url,
    )
    client = None
    if endpoint_url is not None:
        import boto3

        client = boto3.session.Session().client("dynamodb", endpoint_url=endpoint_url)
    persistence = DynamoDBPersistenceLayer(
        table_name=settings.idempotency_table, boto3_client=client
    )
    config = IdempotencyConfig(
        event_key_jmespath="idempotency_key",
        # The same key with another amount or currency is another payment: refuse it rather
        # than answer with the first one's outcome.
        payload_validation_jmespath="[amount, currency]",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=settings.idempotency_seconds,
    )
    return DeferredPaymentConsumer(breaker, make_provider(settings.payment), persistence, config)


# One consumer per container, built during init.
consumer = create_consumer()


@tracer.capture_lambda_handler(capture_response=False)
@log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return consumer(event, context)
