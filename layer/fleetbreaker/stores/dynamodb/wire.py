"""The DynamoDB wire: the client, the botocore hooks, and the store's two requests.

``Wire`` owns one table's client (built on first use with short timeouts and one quick
retry), sends the GetItem and the conditional UpdateItem the store is made of, and turns
what comes back into raw items or a store error. It knows nothing of the rules: the store
plans writes, the codec spells them, the wire sends them and makes a re-sent or lost write
take effect at most once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from fleetbreaker.errors import (
    ACCESS_DENIED,
    AUTHENTICATION_REFUSED,
    WRONG_KEY_SCHEMA,
    StoreError,
    StoreMisconfiguredError,
    TableNotFoundError,
)
from fleetbreaker.stores.dynamodb.codec import KEY_ATTRIBUTE, OP_ATTRIBUTE, Write

if TYPE_CHECKING:
    from botocore.config import Config
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from fleetbreaker.stores.base import StoreStats

# How long the breaker may wait on DynamoDB: short timeouts and one quick retry. Legacy retry
# mode uses DynamoDB's own 50 ms base delay, where standard mode could sleep up to a second.
DEFAULT_TIMEOUTS = {"connect_timeout": 0.2, "read_timeout": 0.3}
DEFAULT_RETRIES = {"mode": "legacy", "total_max_attempts": 2}

log = logging.getLogger("fleetbreaker")


def _attempts(retries: dict[str, Any] | None) -> int | None:
    """Total attempts a botocore retries setting allows; None when it leaves botocore's
    default (up to 11 attempts for DynamoDB in legacy mode, 3 in standard mode)."""
    if not retries:
        return None
    if "total_max_attempts" in retries:
        return int(retries["total_max_attempts"])
    if "max_attempts" in retries:
        return int(retries["max_attempts"]) + 1
    return None


def note_looser_client(client: Any) -> None:
    """Log one line when a passed client's timeouts or retries exceed the store's own.

    Not an error, and the client is used as it is (its credentials, endpoint, proxies and
    retry policy are the caller's choice): the breaker's total deadline per store operation
    bounds the wait whatever the client does.
    """
    config = getattr(getattr(client, "meta", None), "config", None)
    if config is None or not hasattr(config, "connect_timeout"):
        return
    allowed = cast("int", DEFAULT_RETRIES["total_max_attempts"])
    attempts = _attempts(config.retries)
    looser = []
    for setting in ("connect_timeout", "read_timeout"):
        value = getattr(config, setting)
        if value is None or value > DEFAULT_TIMEOUTS[setting]:
            looser.append(f"{setting}={value}")
    if attempts is None or attempts > allowed:
        looser.append(f"retries={config.retries}")
    if looser:
        log.info(
            "fleetbreaker: the DynamoDB client passed to DynamoDBStore allows %s, more than "
            "the store's own (connect 0.2 s, read 0.3 s, 2 attempts); it is used as it is and "
            "the breaker's store_deadline_seconds bounds each store operation",
            ", ".join(looser),
        )


# The operations the store sends; their 200 answers are checked before botocore parses them.
_OPERATIONS = ("GetItem", "UpdateItem", "Scan")

# Error codes that are configuration, not weather: retrying cannot help, a setting must change.
# (DynamoDB's own, and those of the signature and token checks in front of every AWS API.)
DENIED_CODES = frozenset({"AccessDeniedException", "AccessDenied"})
AUTHENTICATION_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "IncompleteSignatureException",
        "MissingAuthenticationTokenException",
        "InvalidClientTokenId",
        "ExpiredTokenException",
    }
)
# What DynamoDB says when the key sent is not the table's key (a table keyed otherwise).
WRONG_KEY_MESSAGE = "key element does not match the schema"
_XML_ERROR = re.compile(r"<Code>([^<]+)</Code>(?:.*?<Message>([^<]*)</Message>)?", re.DOTALL)


def error_code(exc: Any) -> tuple[str, str]:
    """A botocore ClientError's code and message.

    DynamoDB answers in JSON; an authorization failure from a front door that answers in XML
    (moto's IAM check does, with HTTP 403) reaches botocore as code "403" with the XML as its
    message: the real code is read out of it, so an access denied is never taken for weather.
    """
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    found = _XML_ERROR.search(message) if code.isdigit() else None
    if found is not None:
        code, message = found.group(1), found.group(2) or message
    return code, message


def check_answer(response_dict: dict[str, Any], **_: Any) -> None:
    """A botocore ``before-parse`` handler: a 200 answer must be a JSON object.

    botocore reads a body that is not JSON (or is cut short) as an empty answer, which the
    store would take for "no item": a garbled answer would then pass as "closed".
    """
    if response_dict.get("status_code") != 200:
        return
    body = response_dict.get("body", b"")
    try:
        parsed = json.loads(body)
    except (ValueError, TypeError):
        parsed = None
    if not isinstance(parsed, dict):
        raise StoreError(
            f"DynamoDB answered 200 with a body that is not a JSON object: {bytes(body)[:60]!r}"
        )


class _MaybeApplied(Exception):
    """An attempt of one of the store's writes failed in a way that may have applied it."""


# Set on the thread sending one of the store's counting UpdateItems (the handler below runs
# there too).
_sending = threading.local()


def refuse_blind_resend(caught_exception: object = None, response: Any = None, **_: Any) -> None:
    """A botocore ``needs-retry`` handler: never re-send a count that may have applied.

    A read timeout, a connection closed after the request went out, or a 5xx answer leaves
    the write's fate unknown. A count (a failure, a report's ADD) re-sent could apply twice:
    its operation id stops a re-send only while nothing else has written the item since, and
    no fence stops two ADDs. So the store reads the item back instead (see Wire.read_back). A
    fenced write is re-sent as usual (its fences, or its id, stop a second application), as
    is any request that never left (refused, connect timeout) or was refused without applying
    (throttling, 4xx). Other requests on the client, the caller's own included, are not
    touched.
    """
    if not getattr(_sending, "count", False):
        return
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

    if caught_exception is not None:
        if isinstance(caught_exception, (EndpointConnectionError, ConnectTimeoutError)):
            return
        raise _MaybeApplied(str(caught_exception))
    http = response[0] if isinstance(response, tuple) and response else None
    status = getattr(http, "status_code", 0)
    if isinstance(status, int) and status >= 500:
        raise _MaybeApplied(f"HTTP {status}")


def _watch(client: Any) -> None:
    """Register the store's handlers on a client (once: the unique ids make it idempotent)."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is None:
        return
    for operation in _OPERATIONS:
        events.register(
            f"before-parse.dynamodb.{operation}",
            check_answer,
            unique_id=f"fleetbreaker-check-answer-{operation}",
        )
    events.register_first(
        "needs-retry.dynamodb.UpdateItem",
        refuse_blind_resend,
        unique_id="fleetbreaker-refuse-blind-resend",
    )


class Wire:
    """One table's client and the requests the store sends on it.

    Parameters
    ----------
    table_name:
        The table every request names.
    stats:
        Counts each read and write sent (shared with the store, which reports it).
    client:
        A ready client, used as it is (see ``note_looser_client``); None builds one on
        first use from ``boto_config`` and ``endpoint_url``.
    """

    def __init__(
        self,
        table_name: str,
        stats: StoreStats,
        *,
        client: DynamoDBClient | None = None,
        boto_config: Config | None = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
    ) -> None:
        self.table_name = table_name
        # What named the table, for the errors a misconfiguration raises (see translate).
        self.configured_by = "table_name"
        self.stats = stats
        self._client_lock = threading.Lock()
        if client is not None:
            note_looser_client(client)
            _watch(client)
        self._client: DynamoDBClient | None = client
        self._boto_config = boto_config
        self._endpoint_url = endpoint_url
        self._region_name = region_name

    @property
    def client(self) -> DynamoDBClient:
        # Created on first use so an import or a constructor never pays for boto3's setup.
        if self._client is None:
            self.prepare()
        assert self._client is not None
        return self._client

    def prepare(self) -> None:
        """Build the client now (no request)."""
        with self._client_lock:
            if self._client is None:
                self._client = self._make_client()

    def drop_connections(self) -> None:
        """Empty the client's connection pool: the next request opens a new connection.

        botocore's public ``close()`` clears the pool and keeps the client usable (its
        credentials, its config, the store's handlers). The same for a client the caller
        passed: a pool emptied after a restored snapshot costs one connection, and requests
        in flight finish on theirs (urllib3 closes a pool's connections as they come back).
        A client not built yet has nothing to drop.
        """
        client = self._client
        close = getattr(client, "close", None)
        if callable(close):
            close()

    def _make_client(self) -> DynamoDBClient:
        import boto3
        from botocore.config import Config

        config = Config(**DEFAULT_TIMEOUTS, retries=DEFAULT_RETRIES)  # type: ignore[arg-type]
        if self._boto_config is not None:
            config = config.merge(self._boto_config)
        region = self._region_name
        if region is None and getattr(config, "region_name", None) is None:
            # Lambda sets AWS_REGION and AWS_DEFAULT_REGION; elsewhere AWS_REGION may be the
            # only one exported, and the pinned boto3 reads AWS_DEFAULT_REGION alone.
            region = os.environ.get("AWS_REGION", "").strip() or None
        client = boto3.session.Session().client(
            "dynamodb", config=config, endpoint_url=self._endpoint_url, region_name=region
        )
        _watch(client)
        return client

    def translate(self, exc: Exception) -> StoreError:
        """The store error a failed request becomes: a :class:`StoreMisconfiguredError` when
        a setting must change (no such table, a table keyed otherwise, access denied,
        credentials refused), else a plain :class:`StoreError` (weather)."""
        from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

        if isinstance(exc, StoreError):  # check_answer's, raised from inside botocore
            return exc
        table, named = self.table_name, self.configured_by
        if isinstance(exc, ClientError):
            code, message = error_code(exc)
            if code == "ResourceNotFoundException":
                return TableNotFoundError(
                    f"DynamoDB table {table!r} does not exist in {self.region} (named by {named})",
                    variable=named,
                )
            if code == "ValidationException" and WRONG_KEY_MESSAGE in message:
                return StoreMisconfiguredError(
                    f"DynamoDB table {table!r} (named by {named}) is not keyed by "
                    f"{KEY_ATTRIBUTE} (S): {message}",
                    problem=WRONG_KEY_SCHEMA,
                    variable=named,
                )
            if code in DENIED_CODES:
                return StoreMisconfiguredError(
                    f"DynamoDB {code}: access denied to table {table!r} (named by {named}): "
                    f"{message}",
                    problem=ACCESS_DENIED,
                    variable=named,
                )
            if code in AUTHENTICATION_CODES:
                return StoreMisconfiguredError(
                    f"DynamoDB refused the credentials ({code}) for table {table!r}: {message}",
                    problem=AUTHENTICATION_REFUSED,
                    variable=named,
                )
            return StoreError(f"DynamoDB {code or 'error'} on table {table!r}: {exc}")
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return StoreMisconfiguredError(
                f"no usable AWS credentials for DynamoDB table {table!r}: {exc}",
                problem=AUTHENTICATION_REFUSED,
                variable=named,
            )
        return StoreError(f"DynamoDB unreachable for table {table!r}: {exc}")

    @property
    def region(self) -> str:
        """The client's region, for messages ("an unknown region" before it exists)."""
        client = self._client
        region = getattr(getattr(client, "meta", None), "region_name", None)
        return f"region {region}" if isinstance(region, str) and region else "an unknown region"

    def get(self, name: str, *, consistent: bool) -> dict[str, Any] | None:
        """One GetItem: the raw item, or None when there is none."""
        self.stats.count_read()
        try:
            response = self.client.get_item(
                TableName=self.table_name,
                Key={KEY_ATTRIBUTE: {"S": name}},
                ConsistentRead=consistent,
            )
        except Exception as exc:
            raise self.translate(exc) from exc
        return self.whole(name, response.get("Item"), "GetItem")

    def whole(self, name: str, item: object, operation: str) -> dict[str, Any] | None:
        """An item as DynamoDB returns it: whole, with its key, or None.

        A stored item always carries its key, so an answer whose item lacks it was garbled on
        the way (a store error), while an item with its key but missing attributes is what
        the table holds (a corrupt record). A body altered in transit from real DynamoDB is
        also caught by botocore's CRC32 check of the x-amz-crc32 header.
        """
        if item is None:
            return None
        if not isinstance(item, dict) or item.get(KEY_ATTRIBUTE) != {"S": name}:
            raise StoreError(
                f"DynamoDB {operation} answered a partial item for breaker {name!r} on table "
                f"{self.table_name!r}: {str(item)[:80]}"
            )
        return item

    def update(
        self,
        name: str,
        write: Write,
        mine: Callable[[dict[str, Any]], bool] | None = None,
        *,
        counts: bool = False,
    ) -> tuple[bool, dict[str, Any] | None]:
        """Run one conditional UpdateItem: (applied, item after it or the item that stopped it).

        botocore may re-send it after an attempt whose fate is unknown. Every write carries a
        fresh operation id and requires the item not to: a re-sent attempt that finds its own
        id knows the first applied. A fenced write re-sent after another write landed fails
        its fences instead; ``mine`` then tells from the item that it applied all the same (a
        claim finds its token). ``counts`` marks a write that adds to a count, which no fence
        stops from applying twice: it is never re-sent (see refuse_blind_resend, read_back).
        """
        from botocore.exceptions import ClientError

        self.stats.count_write()
        op = secrets.token_hex(8)
        written = write.set(OP_ATTRIBUTE, op).value(op)
        at_op = write.name(OP_ATTRIBUTE)
        write.require(f"attribute_not_exists({at_op}) OR {at_op} <> {written}")
        _sending.count = counts
        try:
            response = self.client.update_item(
                TableName=self.table_name,
                Key={KEY_ATTRIBUTE: {"S": name}},
                UpdateExpression=write.expression(),
                ConditionExpression=" AND ".join(write.conditions),
                ExpressionAttributeNames=write.names,
                ExpressionAttributeValues=write.values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except _MaybeApplied as exc:
            return self.read_back(name, op, str(exc))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise self.translate(exc) from exc
            old = self.whole(name, exc.response.get("Item"), "UpdateItem")
            if old is None:
                # Either the item does not exist, or the endpoint ignores ALL_OLD (dynalite):
                # one consistent read tells which.
                old = self.get(name, consistent=True)
            if old is not None and (
                old.get(OP_ATTRIBUTE) == {"S": op} or (mine is not None and mine(old))
            ):
                # A re-sent attempt of this very write: the first one applied (and, if the id
                # is not there, another write landed since). ALL_NEW would have been this item.
                return True, old
            return False, old
        except Exception as exc:
            raise self.translate(exc) from exc
        finally:
            _sending.count = False
        # ALL_NEW: an applied update always returns the whole item.
        item = self.whole(name, response.get("Attributes") or {}, "UpdateItem")
        return True, item

    def read_back(self, name: str, op: str, failure: str) -> tuple[bool, dict[str, Any] | None]:
        """A count whose attempt may have applied: taken as applied, never sent again.

        Its id on the item says it applied. Without it, it did not apply yet (still on its
        way), did not apply at all, or applied and another write replaced the id: sent again
        it could count twice, so it is taken as counted (at worst, one count is lost). The
        item read is the caller's fresh view. No store error: a container meeting slow
        answers during an incident stays on the shared breaker.
        """
        _sending.count = False  # the read-back is not one of the guarded writes
        item = self.get(name, consistent=True)
        if item is None or item.get(OP_ATTRIBUTE) != {"S": op}:
            log.info(
                "fleetbreaker: breaker %r: a count's answer was lost (%s); its id is not on the "
                "item, so it is taken as counted, never sent twice",
                name,
                failure,
            )
        return True, item

    def scan(self, request: dict[str, Any]) -> dict[str, Any]:
        """One page of a Scan of the table (``request`` adds paging and consistency)."""
        self.stats.count_read()
        try:
            page: dict[str, Any] = self.client.scan(TableName=self.table_name, **request)  # type: ignore[assignment]
        except Exception as exc:
            raise self.translate(exc) from exc
        return page
