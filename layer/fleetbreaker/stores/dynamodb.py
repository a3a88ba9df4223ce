"""DynamoDB store: one item per breaker, every change one conditional UpdateItem.

Each operation starts from the caller's observed record to choose a write and fences that
write on what it assumed (state, generation, window or lease token). When the condition
fails, DynamoDB hands back the current item (ReturnValuesOnConditionCheckFailure=ALL_OLD),
and the operation re-plans from it: no read-modify-write, no lost updates, and a lost race
still teaches the caller the current state in the same round trip.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from fleetbreaker import state as rules
from fleetbreaker.errors import ConfigError, CorruptRecordError, StoreError, TableNotFoundError
from fleetbreaker.frozen import replace
from fleetbreaker.state import (
    MAX_PROBE_SLOTS,
    Lease,
    Outcome,
    Policy,
    ProbeReport,
    Record,
    Report,
    State,
)
from fleetbreaker.stores import TABLE_ENV, default_table_name
from fleetbreaker.stores.base import Listing, StoreStats

if TYPE_CHECKING:
    from collections.abc import Iterator

    from botocore.config import Config
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from fleetbreaker.tuning import Action

KEY_ATTRIBUTE = "name"
TTL_ATTRIBUTE = "expires_at"
# The id of the write that last changed the item (random, one per UpdateItem the store
# sends). botocore re-sends a request after a read timeout although the first attempt may
# have applied; every write requires a different id, so the re-sent one cannot apply again,
# and the id it then finds tells the store its own first attempt did.
OP_ATTRIBUTE = "op"

# Scalar attributes every usable item has, all numbers. The Python parser and the USABLE
# condition below must agree, or a corrupt item could be both "absent" and "present".
_NUMBERS = rules.RECORD_NUMBERS
assert TTL_ATTRIBUTE in _NUMBERS
_STATES = tuple(state.value for state in State)

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
    no fence stops two ADDs. So the store reads the item back instead (see _read_back). A
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


def _slot_names(slot: int) -> tuple[str, str]:
    return f"probe{slot}_token", f"probe{slot}_until"


def _holding(token_name: str, token: str) -> Callable[[dict[str, Any]], bool]:
    """Whether an item read back holds this lease token: the claim that wrote it applied."""
    return lambda item: _scalar(item, token_name, "S") == token


def _since_name(slot: int) -> str:
    """When the slot's lease was granted, on its claimer's clock (rules.lease_ended)."""
    return f"probe{slot}_since"


def _number(item: dict[str, Any], name: str) -> int:
    raw = item.get(name)
    if not isinstance(raw, dict) or "N" not in raw:
        raise CorruptRecordError(f"attribute {name!r} is missing or not a number: {raw!r}")
    return _integer(name, raw["N"])


def _integer(name: str, raw: object) -> int:
    """A stored number the package can trust: an integer of at most MAX_RECORD_DIGITS digits.

    DynamoDB numbers may be fractional or 38 digits long; such a value was not written by
    this package and would make later arithmetic (ADD gen 1) fail, so the item is corrupt.
    """
    if not _is_integer(raw):
        raise CorruptRecordError(
            f"attribute {name!r} is not an integer of at most {rules.MAX_RECORD_DIGITS} digits: "
            f"{str(raw)[:40]!r}"
        )
    return int(cast("str", raw))


def _scalar(item: dict[str, Any], name: str, kind: str) -> Any:
    raw = item.get(name)
    return raw.get(kind) if isinstance(raw, dict) else None


def parse_item(item: dict[str, Any] | None, now_ms: int) -> Record | None:
    """Turn a raw DynamoDB item into a Record; None when absent or past its TTL.

    Raises CorruptRecordError when the item is not one this package wrote.
    """
    if not item:
        return None
    raw_state = _scalar(item, "state", "S")
    if raw_state not in _STATES:
        raise CorruptRecordError(f"attribute 'state' is not a breaker state: {item.get('state')!r}")
    numbers = {name: _number(item, name) for name in _NUMBERS}
    leases: dict[int, Lease] = {}
    for slot in range(MAX_PROBE_SLOTS):
        token_name, until_name = _slot_names(slot)
        token = _scalar(item, token_name, "S")
        until = _scalar(item, until_name, "N")
        # An expiry that is not a number is a free slot; the claim condition agrees (it
        # accepts a slot whose expiry is not a number). A numeric expiry the condition would
        # compare but the parser cannot trust (fractional, no token) makes the item corrupt,
        # so parser and condition never disagree on whether the slot is held.
        if until is None:
            continue
        if not isinstance(token, str):
            raise CorruptRecordError(f"attribute {until_name!r} has no {token_name!r}")
        # A grant time that is missing or not an integer is unknown: the lease then lasts
        # until its expiry. The claim condition compares only a number (since > now + ...).
        since = _scalar(item, _since_name(slot), "N")
        granted = int(since) if _is_integer(since) else None
        leases[slot] = Lease(token, _integer(until_name, until), granted)
    quorum: dict[str, dict[str, int]] = {}
    for code in rules.QUORUM_CODES:
        raw_map = _scalar(item, code, "M")
        entries = raw_map if isinstance(raw_map, dict) else {}
        quorum[code] = {
            container: int(value["N"])
            for container, value in entries.items()
            if isinstance(value, dict) and _is_integer(value.get("N"))
        }

    def window_number(field: str) -> int | None:
        # Not a number: the bucket reads as empty, as the report's condition assumes
        # (NOT attribute_type N). A number it cannot trust: corrupt, for the same reason.
        raw = _scalar(item, field, "N")
        return None if raw is None else _integer(field, raw)

    rev = window_number("rev")
    record = Record(
        state=State(raw_state),
        gen=numbers["gen"],
        failures=numbers["failures"],
        window_start=numbers["window_start"],
        opened_at=numbers["opened_at"],
        open_until=numbers["open_until"],
        reopens=numbers["reopens"],
        successes=numbers["successes"],
        leases=leases,
        updated_at=numbers["updated_at"],
        expires_at=numbers[TTL_ATTRIBUTE],
        rev=rev if rev is not None else 0,
        **rules.parse_window(window_number, quorum),
    )
    # Operator fields are text; anything else in them is left for the next tune to replace.
    texts = {name: _scalar(item, name, "S") for name in rules.RECORD_TEXTS}
    kept: dict[str, Any] = {k: v for k, v in texts.items() if isinstance(v, str)}
    record = replace(record, **kept)
    return None if record.is_expired(now_ms) else record


def _is_integer(raw: object) -> bool:
    if not isinstance(raw, str) or not raw.isascii():
        return False
    digits = raw[1:] if raw.startswith("-") else raw
    return digits.isdigit() and len(digits) <= rules.MAX_RECORD_DIGITS


# A report that also rewrites the quorum map tries that many times; later attempts send its
# counts alone (see DynamoDBStore.report).
_MAP_ATTEMPTS = 3

# Everything the rate policy keeps in an item: the buckets, the quorum maps and their rev.
_WINDOW_ATTRIBUTES = (
    *(
        rules.bucket_field(slot, code)
        for slot in range(rules.WINDOW_BUCKETS)
        for code in rules.BUCKET_CODES
    ),
    *rules.QUORUM_CODES,
    "rev",
)


# Attributes besides state and the numbers that can make an item corrupt: a replacement of
# a corrupt item is fenced on them too.
_FENCED = (
    *(_slot_names(slot)[1] for slot in range(MAX_PROBE_SLOTS)),
    *(rules.bucket_field(slot, "i") for slot in range(rules.WINDOW_BUCKETS)),
    "rev",
)


class _Write:
    """One UpdateItem under construction: expression parts plus their placeholders."""

    def __init__(self, now_ms: int, policy: Policy, state: State | None = None) -> None:
        self.sets: list[str] = []
        self.adds: list[str] = []
        self.removes: list[str] = []
        self.conditions: list[str] = []
        self.names: dict[str, str] = {}
        self.values: dict[str, dict[str, Any]] = {}
        self.now_ms = now_ms
        self.set("updated_at", now_ms)
        ttl_s = rules.ttl_seconds(policy, state) if state is not None else policy.ttl_s
        self.set(TTL_ATTRIBUTE, now_ms // 1000 + ttl_s)

    def name(self, attribute: str) -> str:
        placeholder = f"#{attribute}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: int | str | Mapping[str, int]) -> str:
        placeholder = f":v{len(self.values)}"
        if isinstance(value, str):
            self.values[placeholder] = {"S": value}
        elif isinstance(value, int):
            self.values[placeholder] = {"N": str(value)}
        else:
            self.values[placeholder] = {"M": {k: {"N": str(v)} for k, v in value.items()}}
        return placeholder

    def set(self, attribute: str, value: int | str | Mapping[str, int]) -> _Write:
        self.sets.append(f"{self.name(attribute)} = {self.value(value)}")
        return self

    def add(self, attribute: str, amount: int) -> _Write:
        self.adds.append(f"{self.name(attribute)} {self.value(amount)}")
        return self

    def remove_window(self) -> _Write:
        self.removes.extend(self.name(attribute) for attribute in _WINDOW_ATTRIBUTES)
        return self

    def remove_leases(self, slots: range) -> _Write:
        for slot in slots:
            names = (*_slot_names(slot), _since_name(slot))
            self.removes.extend(self.name(attribute) for attribute in names)
        return self

    def require(self, condition: str) -> _Write:
        self.conditions.append(f"({condition})")
        return self

    def usable(self) -> str:
        """The item exists, is one of ours, and is within its TTL."""
        states = ", ".join(self.value(state) for state in _STATES)
        number = self.value("N")
        typed = " AND ".join(f"attribute_type({self.name(n)}, {number})" for n in _NUMBERS)
        alive = f"{self.name(TTL_ATTRIBUTE)} > {self.value(self.now_ms // 1000)}"
        return f"{self.name('state')} IN ({states}) AND {typed} AND {alive}"

    def replaceable(self, corrupt: dict[str, Any] | None) -> str:
        """The condition of a write that replaces an absent, expired or corrupt item.

        NOT usable covers the absent and expired ones and those of the wrong types. An item
        of the right types whose values cannot be trusted (a fractional gen, 38 digits) is
        usable to DynamoDB, so the replacement is also allowed when the item still holds
        exactly the raw values the store read and rejected.
        """
        absent = f"NOT ({self.usable()})"
        if not corrupt:
            return absent
        fence = []
        for attribute in ("state", *_NUMBERS, *_FENCED):
            raw = corrupt.get(attribute)
            if raw is None:
                fence.append(f"attribute_not_exists({self.name(attribute)})")
            elif isinstance(raw, dict) and set(raw) <= {"S", "N"}:
                placeholder = f":v{len(self.values)}"
                self.values[placeholder] = raw
                fence.append(f"{self.name(attribute)} = {placeholder}")
        return f"{absent} OR ({' AND '.join(fence)})"

    def is_(self, attribute: str, value: int | str) -> str:
        return f"{self.name(attribute)} = {self.value(value)}"

    def expression(self) -> str:
        parts = [f"SET {', '.join(self.sets)}"]
        if self.adds:
            parts.append(f"ADD {', '.join(self.adds)}")
        if self.removes:
            parts.append(f"REMOVE {', '.join(self.removes)}")
        return " ".join(parts)


def _alive(observed: Record | None, now_ms: int) -> Record | None:
    """The caller's view, unless it is past its TTL (then the item counts as absent)."""
    return None if observed is None or observed.is_expired(now_ms) else observed


def _write_record(write: _Write, record: Record) -> _Write:
    """SET every scalar of a whole record (gen excepted: callers ADD or SET it).

    The rate policy's window goes: a whole-record write starts a new state or generation.
    """
    write.remove_window()
    write.set("state", record.state.value)
    for attribute in (
        "failures",
        "window_start",
        "opened_at",
        "open_until",
        "reopens",
        "successes",
    ):
        write.set(attribute, getattr(record, attribute))
    return write


def _write_window(write: _Write, record: Record) -> _Write:
    """SET a fresh record's window: its buckets and quorum maps."""
    for slot, bucket in record.buckets.items():
        for code, attr in rules.BUCKET_CODES.items():
            write.set(rules.bucket_field(slot, code), getattr(bucket, attr))
    write.set("fq", record.failing).set("sq", record.slowing)
    # Drop the REMOVEs of the attributes just set (one expression cannot name one twice).
    set_names = {part.split(" = ")[0] for part in write.sets}
    write.removes = [name for name in write.removes if name not in set_names]
    return write


class DynamoDBStore:
    """Keeps breakers in a DynamoDB table whose partition key is ``name`` (S).

    Parameters
    ----------
    table_name:
        The table; defaults to the ``CIRCUIT_BREAKER_TABLE`` environment variable.
    boto3_client:
        A ready DynamoDB client, used as it is. Timeouts or retries looser than the store's
        own (0.2 s connect, 0.3 s read, two attempts) are not an error: they get one log
        line, and the breaker's ``store_deadline_seconds`` bounds every store operation.
    boto_config:
        A botocore Config merged over the store's bounded defaults (0.2 s connect, 0.3 s
        read, one retry).
    endpoint_url:
        For local DynamoDB (moto, dynalite). ``AWS_ENDPOINT_URL_DYNAMODB`` also works.
    consistent_read:
        Use strongly consistent reads for loads (default True).

    Example
    -------
    >>> store = DynamoDBStore(table_name="CircuitBreakers")  # no request until first use
    >>> CircuitBreaker("payment-api", store=store)
    CircuitBreaker('payment-api', store=DynamoDBStore)
    """

    def __init__(
        self,
        table_name: str | None = None,
        *,
        boto3_client: DynamoDBClient | None = None,
        boto_config: Config | None = None,
        endpoint_url: str | None = None,
        consistent_read: bool = True,
    ) -> None:
        table = table_name if table_name is not None else default_table_name()
        if not isinstance(table, str) or not table.strip():
            raise ConfigError(
                f"DynamoDBStore needs a table name: pass table_name= or set {TABLE_ENV}"
            )
        if not 3 <= len(table) <= 255:
            raise ConfigError(f"DynamoDB table names are 3 to 255 characters, got {table!r}")
        self.table_name = table
        self.consistent_read = consistent_read
        self.stats = StoreStats()
        self._client_lock = threading.Lock()
        if boto3_client is not None:
            note_looser_client(boto3_client)
            _watch(boto3_client)
        self._client: DynamoDBClient | None = boto3_client
        self._boto_config = boto_config
        self._endpoint_url = endpoint_url

    @property
    def client(self) -> DynamoDBClient:
        # Created on first use so an import or a constructor never pays for boto3's setup.
        if self._client is None:
            self.prepare()
        assert self._client is not None
        return self._client

    def prepare(self) -> None:
        """Build the client now (no request): the breaker calls this before the first store
        operation, so boto3's setup does not count against the store deadline."""
        with self._client_lock:
            if self._client is None:
                self._client = self._make_client()

    def _make_client(self) -> DynamoDBClient:
        import boto3
        from botocore.config import Config

        config = Config(**DEFAULT_TIMEOUTS, retries=DEFAULT_RETRIES)  # type: ignore[arg-type]
        if self._boto_config is not None:
            config = config.merge(self._boto_config)
        client = boto3.session.Session().client(
            "dynamodb", config=config, endpoint_url=self._endpoint_url
        )
        _watch(client)
        return client

    # -- raw calls -------------------------------------------------------------------------

    def _translate(self, exc: Exception) -> StoreError:
        from botocore.exceptions import ClientError

        if isinstance(exc, StoreError):  # check_answer's, raised from inside botocore
            return exc
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                return TableNotFoundError(f"DynamoDB table {self.table_name!r} does not exist")
            return StoreError(f"DynamoDB {code or 'error'} on table {self.table_name!r}: {exc}")
        return StoreError(f"DynamoDB unreachable for table {self.table_name!r}: {exc}")

    def _get(self, name: str, *, consistent: bool | None = None) -> dict[str, Any] | None:
        self.stats.count_read()
        try:
            response = self.client.get_item(
                TableName=self.table_name,
                Key={KEY_ATTRIBUTE: {"S": name}},
                ConsistentRead=self.consistent_read if consistent is None else consistent,
            )
        except Exception as exc:
            raise self._translate(exc) from exc
        return self._whole(name, response.get("Item"), "GetItem")

    def _whole(self, name: str, item: object, operation: str) -> dict[str, Any] | None:
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

    def _update(
        self,
        name: str,
        write: _Write,
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
        stops from applying twice: it is never re-sent (see refuse_blind_resend, _read_back).
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
            return self._read_back(name, op, str(exc))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise self._translate(exc) from exc
            old = self._whole(name, exc.response.get("Item"), "UpdateItem")
            if old is None:
                # Either the item does not exist, or the endpoint ignores ALL_OLD (dynalite):
                # one consistent read tells which.
                old = self._get(name)
            if old is not None and (
                old.get(OP_ATTRIBUTE) == {"S": op} or (mine is not None and mine(old))
            ):
                # A re-sent attempt of this very write: the first one applied (and, if the id
                # is not there, another write landed since). ALL_NEW would have been this item.
                return True, old
            return False, old
        except Exception as exc:
            raise self._translate(exc) from exc
        finally:
            _sending.count = False
        # ALL_NEW: an applied update always returns the whole item.
        item = self._whole(name, response.get("Attributes") or {}, "UpdateItem")
        return True, item

    def _read_back(self, name: str, op: str, failure: str) -> tuple[bool, dict[str, Any] | None]:
        """A count whose attempt may have applied: taken as applied, never sent again.

        Its id on the item says it applied. Without it, it did not apply yet (still on its
        way), did not apply at all, or applied and another write replaced the id: sent again
        it could count twice, so it is taken as counted (at worst, one count is lost). The
        item read is the caller's fresh view. No store error: a container meeting slow
        answers during an incident stays on the shared breaker.
        """
        _sending.count = False  # the read-back is not one of the guarded writes
        item = self._get(name, consistent=True)
        if item is None or item.get(OP_ATTRIBUTE) != {"S": op}:
            log.info(
                "fleetbreaker: breaker %r: a count's answer was lost (%s); its id is not on the "
                "item, so it is taken as counted, never sent twice",
                name,
                failure,
            )
        return True, item

    def _parse_or_absent(
        self, item: dict[str, Any] | None, now_ms: int
    ) -> tuple[Record | None, dict[str, Any] | None]:
        """The record, and the raw item when it is corrupt (the record is then None).

        Inside an operation a corrupt item is planned as absent; its "fresh" write is fenced
        on the raw item (see _Write.replaceable), so it repairs the item instead of failing
        on it forever.
        """
        try:
            return parse_item(item, now_ms), None
        except CorruptRecordError:
            return None, item

    # -- the contract ----------------------------------------------------------------------

    def load(self, name: str, now_ms: int) -> Record | None:
        return parse_item(self._get(name), now_ms)

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None
    ) -> Outcome:
        seen = _alive(observed, now_ms)
        corrupt: dict[str, Any] | None = None
        for _ in range(4):
            planned = rules.apply_failure(seen, policy, now_ms)
            if not planned.changed or planned.record is None:
                return Outcome(seen)
            write = _Write(now_ms, policy)
            if seen is None:
                # Absent, expired or corrupt: write a whole fresh record over it.
                _write_record(write, planned.record).set("gen", planned.record.gen)
                write.remove_leases(range(MAX_PROBE_SLOTS)).require(write.replaceable(corrupt))
            else:
                write.require(write.usable()).require(write.is_("state", State.CLOSED.value))
                write.require(write.is_("gen", seen.gen))
                write.require(write.is_("window_start", seen.window_start))
                if seen.window_start and now_ms - seen.window_start < policy.window_ms:
                    # ADD, not SET: concurrent failures in one window all count.
                    write.add("failures", 1)
                else:
                    write.set("failures", 1).set("window_start", now_ms)
            applied, item = self._update(name, write, counts=True)
            record, corrupt = self._parse_or_absent(item, now_ms)
            if not applied:
                seen = record
                continue
            if seen is None:
                return Outcome(record, changed=True, transition=planned.transition)
            if record is None or record.failures < policy.failure_threshold:
                return Outcome(record, changed=True)
            return self._trip(name, policy, now_ms, record)
        return Outcome(seen)

    def _trip(self, name: str, policy: Policy, now_ms: int, counted: Record) -> Outcome:
        # Many callers can see the count reach the threshold; the generation fence lets
        # exactly one of them open the breaker.
        opened = rules.trip(counted, policy, now_ms)
        write = _write_record(_Write(now_ms, policy), opened).add("gen", 1)
        write.remove_leases(range(MAX_PROBE_SLOTS))
        write.require(write.usable()).require(write.is_("state", State.CLOSED.value))
        write.require(write.is_("gen", counted.gen))
        applied, item = self._update(name, write)
        record, _ = self._parse_or_absent(item, now_ms)
        if applied:
            return Outcome(record, changed=True, transition=(State.CLOSED, State.OPEN))
        return Outcome(record, changed=True)

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        seen = _alive(observed, now_ms)
        for _ in range(policy.max_probes + 2):
            planned = rules.apply_claim(seen, policy, now_ms, nonce)
            if planned.token is None or planned.record is None or seen is None:
                return Outcome(seen)
            token = planned.token
            slot = rules.lease_slot(token)
            assert slot is not None  # make_token wrote it
            token_name, until_name = _slot_names(slot)
            write = _Write(now_ms, policy)
            write.require(write.usable()).require(write.is_("gen", seen.gen))
            lease = planned.record.leases[slot]
            write.set(token_name, token).set(until_name, lease.until)
            write.set(_since_name(slot), now_ms)
            if planned.transition is not None:  # open -> half_open: the first lease
                write.set("state", planned.record.state.value)
                write.set("successes", planned.record.successes).add("gen", 1)
                write.remove_leases(range(1, MAX_PROBE_SLOTS))
                write.require(write.is_("state", State.OPEN.value))
                write.require(f"{write.name('open_until')} <= {write.value(now_ms)}")
            else:
                write.require(write.is_("state", State.HALF_OPEN.value))
                held_until = write.name(until_name)
                # A slot whose expiry is not a number is free (parse_item agrees), and so is
                # one whose lease has ended on this clock (rules.lease_ended).
                future = now_ms + rules.CLOCK_TOLERANCE_MS
                write.require(
                    f"NOT attribute_type({held_until}, {write.value('N')})"
                    f" OR {held_until} <= {write.value(now_ms)}"
                    f" OR {write.name(_since_name(slot))} > {write.value(future)}"
                )
            applied, item = self._update(name, write, mine=_holding(token_name, token))
            record, _ = self._parse_or_absent(item, now_ms)
            if applied:
                return Outcome(record, changed=True, transition=planned.transition, token=token)
            seen = record
        return Outcome(seen)

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        token = report.token
        slot = rules.lease_slot(token)
        if slot is None:
            return Outcome(observed)
        seen = _alive(observed, now_ms)
        if not rules.holds_lease(seen, token, now_ms):
            # The caller's view may predate its own claim (a workflow's later step): ask.
            seen, _ = self._parse_or_absent(self._get(name), now_ms)
        for _ in range(policy.max_probes + 2):
            if not rules.holds_lease(seen, token, now_ms):
                return Outcome(seen)
            assert seen is not None
            planned = rules.apply_settle(seen, policy, now_ms, report)
            after = planned.record
            assert after is not None
            token_name, until_name = _slot_names(slot)
            write = _Write(now_ms, policy)
            write.require(write.usable()).require(write.is_("state", State.HALF_OPEN.value))
            write.require(write.is_("gen", seen.gen)).require(write.is_(token_name, token))
            write.require(f"{write.name(until_name)} > {write.value(now_ms)}")
            # Concurrent successes of several probes must add up, not overwrite each other.
            write.require(write.is_("successes", seen.successes))
            if planned.transition is None:
                write.set("successes", after.successes)
                ended = (token_name, until_name, _since_name(slot))
                write.removes.extend(write.name(a) for a in ended)
            else:
                _write_record(write, after).add("gen", 1).remove_leases(range(MAX_PROBE_SLOTS))
            applied, item = self._update(name, write)
            record, _ = self._parse_or_absent(item, now_ms)
            if applied:
                return Outcome(record, changed=True, transition=planned.transition)
            seen = record
        return Outcome(seen)

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        # The common case is one ADD to the current bucket, fenced only on the bucket's idx
        # and the closed state: concurrent reports commute, so 5,000 containers never make
        # each other retry. Starting a bucket, noting a container for the quorum, or
        # replacing an absent or corrupt item re-plans through the rules and is fenced on
        # what it replaces. Counts commute but a quorum map rewrite does not: after
        # _MAP_ATTEMPTS lost races the counts go without the container's note (a later
        # report notes it), so contention on the map never drops them.
        seen = _alive(observed, now_ms)
        if not report:
            return Outcome(seen)
        idx = rules.bucket_index(policy, now_ms)
        slot = idx % rules.WINDOW_BUCKETS
        corrupt: dict[str, Any] | None = None
        for attempt in range(6):
            planned = rules.apply_report(seen, policy, now_ms, report)
            if not planned.changed or planned.record is None:
                return Outcome(seen)
            write = _Write(now_ms, policy)
            if seen is None:
                after = planned.record
                _write_record(write, after).set("gen", after.gen)
                if planned.transition is None:
                    _write_window(write, after)
                write.remove_leases(range(MAX_PROBE_SLOTS)).require(write.replaceable(corrupt))
            else:
                write.require(write.usable()).require(write.is_("state", State.CLOSED.value))
                if report.gen is not None:
                    write.require(write.is_("gen", seen.gen))
                counted = rules.add_report(seen, policy, now_ms, report)
                bucket = counted.buckets[slot]
                names = {code: rules.bucket_field(slot, code) for code in rules.BUCKET_CODES}
                held = seen.buckets.get(slot)
                if held is not None and held.idx == idx:
                    write.require(write.is_(names["i"], idx))
                    for code, amount in (
                        ("c", report.calls),
                        ("f", report.failures),
                        ("s", report.slow),
                        ("r", 1),
                    ):
                        write.add(names[code], amount)
                else:
                    # The slot holds an older bucket (or none): start this one over it.
                    old_idx = write.name(names["i"])
                    if held is None:
                        write.require(f"NOT attribute_type({old_idx}, {write.value('N')})")
                    else:
                        write.require(write.is_(names["i"], held.idx))
                    for code, attr in rules.BUCKET_CODES.items():
                        write.set(names[code], getattr(bucket, attr))
                noting = counted.failing != seen.failing or counted.slowing != seen.slowing
                if noting and attempt < _MAP_ATTEMPTS:
                    write.set("fq", counted.failing).set("sq", counted.slowing)
                    write.set("rev", seen.rev + 1)
                    rev = write.name("rev")
                    write.require(
                        f"attribute_not_exists({rev})"
                        if seen.rev == 0
                        else write.is_("rev", seen.rev)
                    )
            applied, item = self._update(name, write, counts=True)
            record, corrupt = self._parse_or_absent(item, now_ms)
            if not applied:
                seen = record
                continue
            if seen is None:
                return Outcome(record, changed=True, transition=planned.transition)
            counts = rules.window_counts(record, policy, now_ms)
            if record is None or not rules.should_trip(counts, policy):
                return Outcome(record, changed=True)
            return self._trip(name, policy, now_ms, record)
        return Outcome(seen)

    def force_state(
        self, name: str, policy: Policy, now_ms: int, target: State, *, action: Action | None = None
    ) -> Outcome:
        # Operator actions are rare, so one read first: the write is then fenced on the
        # generation it replaces, and the outcome can name the state it left.
        seen, corrupt = self._parse_or_absent(self._get(name), now_ms)
        for _ in range(4):
            planned = rules.apply_force(seen, policy, now_ms, target)
            after = planned.record
            assert after is not None
            write = _write_record(_Write(now_ms, policy, target), after).set("gen", after.gen)
            write.remove_leases(range(MAX_PROBE_SLOTS))
            if action is not None:
                write.set("last_action", action.encode())
            if seen is None:
                write.require(write.replaceable(corrupt))
            else:
                write.require(write.usable()).require(write.is_("gen", seen.gen))
            applied, item = self._update(name, write)
            record, corrupt = self._parse_or_absent(item, now_ms)
            if applied:
                return Outcome(record, changed=True, transition=planned.transition)
            seen = record
        raise StoreError(f"could not force breaker {name!r} to {target.value}: it keeps changing")

    # -- operators -------------------------------------------------------------------------

    def list_records(self, now_ms: int, *, page_size: int | None = None) -> Iterator[Listing]:
        """Every breaker in the table: a paginated, strongly consistent Scan.

        A Scan reads the whole table (every breaker is one small item), so this is for
        operators, never for the breaker's own path. ``page_size`` caps the items per Scan
        call (default: DynamoDB's 1 MB pages).
        """
        start: dict[str, Any] | None = None
        while True:
            request: dict[str, Any] = {"TableName": self.table_name, "ConsistentRead": True}
            if page_size is not None:
                request["Limit"] = page_size
            if start is not None:
                request["ExclusiveStartKey"] = start
            self.stats.count_read()
            try:
                page = self.client.scan(**request)
            except Exception as exc:
                raise self._translate(exc) from exc
            for item in page.get("Items", []):
                name = _scalar(item, KEY_ATTRIBUTE, "S")
                if not isinstance(name, str):
                    continue
                try:
                    record = parse_item(item, now_ms)
                except CorruptRecordError as exc:
                    yield Listing(name, None, str(exc))
                    continue
                if record is not None:
                    yield Listing(name, record)
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    def tune(
        self, name: str, policy: Policy, now_ms: int, tuned: str, action: Action | None
    ) -> Record | None:
        seen, corrupt = self._parse_or_absent(self._get(name), now_ms)
        for _ in range(4):
            write = _Write(now_ms, policy, seen.state if seen is not None else State.CLOSED)
            if tuned:
                write.set("tuned", tuned)
            else:
                write.removes.append(write.name("tuned"))
            if action is not None:
                write.set("last_action", action.encode())
            if seen is None:
                # No live record: a fresh closed one carries the settings.
                _write_record(write, Record()).set("gen", 0).remove_leases(range(MAX_PROBE_SLOTS))
                write.require(write.replaceable(corrupt))
            else:
                # Fenced on the generation: the TTL written depends on the state it found.
                write.require(write.usable()).require(write.is_("gen", seen.gen))
            applied, item = self._update(name, write)
            record, corrupt = self._parse_or_absent(item, now_ms)
            if applied:
                return record
            seen = record
        raise StoreError(f"could not tune breaker {name!r}: it keeps changing")
