"""The DynamoDB item codec: a raw item to a Record, and a Record's changes to an UpdateItem.

Everything here is pure (no client, no clock): ``parse_item`` reads an item the way the
conditions written by ``Write`` see it, so parser and condition never disagree on whether an
item is usable, a slot is held or a bucket is current.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from fleetbreaker import record as schema
from fleetbreaker.errors import CorruptRecordError
from fleetbreaker.policy import ttl_seconds
from fleetbreaker.record import MAX_PROBE_SLOTS, Bucket, CensusBucket, Lease, Record, State

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy

# Every other attribute name comes from the record's schema (fleetbreaker.record).
KEY_ATTRIBUTE = "name"
TTL_ATTRIBUTE = schema.EXPIRES_AT
# The id of the write that last changed the item (random, one per UpdateItem the store
# sends). botocore re-sends a request after a read timeout although the first attempt may
# have applied; every write requires a different id, so the re-sent one cannot apply again,
# and the id it then finds tells the store its own first attempt did.
OP_ATTRIBUTE = "op"

# Scalar attributes every usable item has, all numbers. The Python parser and the USABLE
# condition below must agree, or a corrupt item could be both "absent" and "present".
_NUMBERS = tuple(schema.NUMBER_FIELDS.values())
assert TTL_ATTRIBUTE in _NUMBERS
_STATES = tuple(state.value for state in State)


def slot_names(slot: int) -> tuple[str, str]:
    """The attributes of a probe slot's lease token and expiry."""
    token, until, _ = schema.lease_fields(slot)
    return token, until


def holding(token_name: str, token: str) -> Callable[[dict[str, Any]], bool]:
    """Whether an item read back holds this lease token: the claim that wrote it applied."""
    return lambda item: scalar(item, token_name, "S") == token


def since_name(slot: int) -> str:
    """When the slot's lease was granted, on its claimer's clock (rules.lease_ended)."""
    return schema.lease_fields(slot)[2]


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
            f"attribute {name!r} is not an integer of at most {schema.MAX_RECORD_DIGITS} digits: "
            f"{str(raw)[:40]!r}"
        )
    return int(cast("str", raw))


def scalar(item: dict[str, Any], name: str, kind: str) -> Any:
    raw = item.get(name)
    return raw.get(kind) if isinstance(raw, dict) else None


def parse_item(item: dict[str, Any] | None, now_ms: int) -> Record | None:
    """Turn a raw DynamoDB item into a Record; None when absent or past its TTL.

    Raises CorruptRecordError when the item is not one this package wrote.
    """
    if not item:
        return None
    raw_state = scalar(item, schema.STATE, "S")
    if raw_state not in _STATES:
        raise CorruptRecordError(
            f"attribute {schema.STATE!r} is not a breaker state: {item.get(schema.STATE)!r}"
        )
    numbers: dict[str, Any] = {
        attribute: _number(item, name) for attribute, name in schema.NUMBER_FIELDS.items()
    }
    leases: dict[int, Lease] = {}
    for slot in range(MAX_PROBE_SLOTS):
        token_name, until_name = slot_names(slot)
        token = scalar(item, token_name, "S")
        until = scalar(item, until_name, "N")
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
        since = scalar(item, since_name(slot), "N")
        granted = int(since) if _is_integer(since) else None
        leases[slot] = Lease(token, _integer(until_name, until), granted)
    quorum: dict[str, dict[str, int]] = {}
    for code in schema.QUORUM_CODES:
        raw_map = scalar(item, code, "M")
        entries = raw_map if isinstance(raw_map, dict) else {}
        quorum[code] = {
            container: int(value["N"])
            for container, value in entries.items()
            if isinstance(value, dict) and _is_integer(value.get("N"))
        }

    def window_number(field: str) -> int | None:
        # Not a number: the bucket reads as empty, as the report's condition assumes
        # (NOT attribute_type N). A number it cannot trust: corrupt, for the same reason.
        raw = scalar(item, field, "N")
        return None if raw is None else _integer(field, raw)

    rev = window_number(schema.REV)
    # Added after the first release: absent (an item written before them) reads as 0.
    optional: dict[str, Any] = {
        attribute: window_number(name) or 0
        for attribute, name in schema.OPTIONAL_NUMBER_FIELDS.items()
    }
    # Operator fields are text; anything else in them is left for the next tune to replace.
    texts = {attribute: scalar(item, name, "S") for attribute, name in schema.TEXT_FIELDS.items()}
    kept: dict[str, Any] = {k: v for k, v in texts.items() if isinstance(v, str)}
    record = Record(
        state=State(raw_state),
        leases=leases,
        rev=rev if rev is not None else 0,
        **numbers,
        **optional,
        **kept,
        **schema.parse_window(window_number, quorum),
    )
    return None if record.is_expired(now_ms) else record


def parse_or_corrupt(
    item: dict[str, Any] | None, now_ms: int
) -> tuple[Record | None, dict[str, Any] | None]:
    """The record, and the raw item when it is corrupt (the record is then None).

    Inside an operation a corrupt item is planned as absent; its "fresh" write is fenced on
    the raw item (see Write.replaceable), so it repairs the item instead of failing on it
    forever.
    """
    try:
        return parse_item(item, now_ms), None
    except CorruptRecordError:
        return None, item


def _is_integer(raw: object) -> bool:
    if not isinstance(raw, str) or not raw.isascii():
        return False
    digits = raw[1:] if raw.startswith("-") else raw
    return digits.isdigit() and len(digits) <= schema.MAX_RECORD_DIGITS


# A report that also rewrites the quorum map tries that many times; later attempts send its

# Everything the rate policy keeps in an item: the buckets, the quorum maps and their rev.
_WINDOW_ATTRIBUTES = (
    *(
        schema.bucket_field(slot, code)
        for slot in range(schema.WINDOW_BUCKETS)
        for code in schema.BUCKET_CODES
    ),
    *schema.QUORUM_CODES,
    schema.REV,
)


# The census ring: state changes keep it (the fleet's size does not change with the state);
# only a write that replaces an absent, expired or corrupt item removes it.
_CENSUS_ATTRIBUTES = tuple(
    schema.census_field(slot, code)
    for slot in range(schema.WINDOW_BUCKETS)
    for code in schema.CENSUS_CODES
)

# Attributes besides state and the numbers that can make an item corrupt: a replacement of
# a corrupt item is fenced on them too.
_FENCED = (
    *(slot_names(slot)[1] for slot in range(MAX_PROBE_SLOTS)),
    *(schema.bucket_field(slot, schema.BUCKET_INDEX) for slot in range(schema.WINDOW_BUCKETS)),
    *(schema.census_field(slot, schema.CENSUS_INDEX) for slot in range(schema.WINDOW_BUCKETS)),
    *schema.OPTIONAL_NUMBER_FIELDS.values(),
    schema.REV,
)


class Write:
    """One UpdateItem under construction: expression parts plus their placeholders."""

    def __init__(
        self, now_ms: int, policy: Policy, state: State | None = None, *, window: bool = True
    ) -> None:
        self.sets: list[str] = []
        self.adds: list[str] = []
        self.removes: list[str] = []
        self.conditions: list[str] = []
        self.names: dict[str, str] = {}
        self.values: dict[str, dict[str, Any]] = {}
        self.now_ms = now_ms
        self.set(schema.UPDATED_AT, now_ms)
        ttl_s = ttl_seconds(policy, state) if state is not None else policy.ttl_s
        self.set(TTL_ATTRIBUTE, now_ms // 1000 + ttl_s)
        if window:
            # A breaker's write says which window it counts over (rules._stamp); an
            # operator's tool may not know it, and leaves the record's (window=False).
            self.set(schema.WINDOW_MS, policy.window_ms)

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

    def set(self, attribute: str, value: int | str | Mapping[str, int]) -> Write:
        self.sets.append(f"{self.name(attribute)} = {self.value(value)}")
        return self

    def sets_attribute(self, attribute: str) -> bool:
        """Whether this write already SETs ``attribute``."""
        return any(part.startswith(f"#{attribute} = ") for part in self.sets)

    def add(self, attribute: str, amount: int) -> Write:
        self.adds.append(f"{self.name(attribute)} {self.value(amount)}")
        return self

    def remove_window(self) -> Write:
        self.removes.extend(self.name(attribute) for attribute in _WINDOW_ATTRIBUTES)
        return self

    def remove_census(self) -> Write:
        self.removes.extend(self.name(attribute) for attribute in _CENSUS_ATTRIBUTES)
        return self

    def remove_leases(self, slots: range) -> Write:
        for slot in slots:
            names = (*slot_names(slot), since_name(slot))
            self.removes.extend(self.name(attribute) for attribute in names)
        return self

    def require(self, condition: str) -> Write:
        self.conditions.append(f"({condition})")
        return self

    def usable(self) -> str:
        """The item exists, is one of ours, and is within its TTL."""
        states = ", ".join(self.value(state) for state in _STATES)
        number = self.value("N")
        typed = " AND ".join(f"attribute_type({self.name(n)}, {number})" for n in _NUMBERS)
        alive = f"{self.name(TTL_ATTRIBUTE)} > {self.value(self.now_ms // 1000)}"
        return f"{self.name(schema.STATE)} IN ({states}) AND {typed} AND {alive}"

    def absent_or_expired(self) -> str:
        """No item, or one past its TTL: what a census write may start afresh. A corrupt
        item that is alive is neither (a census write never replaces one, whatever it is)."""
        ttl = self.name(TTL_ATTRIBUTE)
        now_s = self.value(self.now_ms // 1000)
        return f"attribute_not_exists({self.name(KEY_ATTRIBUTE)}) OR {ttl} <= {now_s}"

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
        for attribute in (schema.STATE, *_NUMBERS, *_FENCED):
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


def write_record(write: Write, record: Record) -> Write:
    """SET every scalar of a whole record (gen excepted: callers ADD or SET it).

    The rate policy's window goes: a whole-record write starts a new state or generation.
    """
    write.remove_window()
    write.set(schema.STATE, record.state.value)
    for attribute, name in schema.NUMBER_FIELDS.items():
        if name not in _SET_APART:
            write.set(name, getattr(record, attribute))
    # A new state or generation starts its own recovery ramp (or none).
    write.set(schema.CLOSED_AT, record.closed_at)
    return write


def write_fresh(write: Write, record: Record, corrupt: dict[str, Any] | None) -> Write:
    """SET ``record`` whole over an absent, expired or corrupt item, fenced on what it replaces
    (Write.replaceable); nothing of the old item stays, its census ring included."""
    write_record(write, record).set(schema.GEN, record.gen)
    if not write.sets_attribute(schema.WINDOW_MS):
        write.set(schema.WINDOW_MS, record.window_ms)
    write.remove_leases(range(MAX_PROBE_SLOTS)).remove_census()
    for slot, bucket in record.census.items():
        write_census(write, slot, bucket)
    write.removes = _not_set(write)
    return write.require(write.replaceable(corrupt))


def write_census(write: Write, slot: int, bucket: CensusBucket) -> Write:
    """SET both numbers of the census ring's slice in ``slot``."""
    for code, attribute in schema.CENSUS_CODES.items():
        write.set(schema.census_field(slot, code), getattr(bucket, attribute))
    return write


def _not_set(write: Write) -> list[str]:
    """The REMOVEs of ``write`` without the attributes it SETs (an expression cannot name
    one attribute twice)."""
    set_names = {part.split(" = ")[0] for part in write.sets}
    return [name for name in write.removes if name not in set_names]


# Numbers write_record leaves to others: Write sets the times, callers ADD or SET gen.
_SET_APART = (schema.GEN, schema.UPDATED_AT, schema.EXPIRES_AT)


def write_window(write: Write, record: Record) -> Write:
    """SET a fresh record's window: its buckets and quorum maps."""
    for slot, bucket in record.buckets.items():
        write_bucket(write, slot, bucket)
    write_quorum(write, record)
    write.removes = _not_set(write)
    return write


def write_bucket(write: Write, slot: int, bucket: Bucket) -> Write:
    """SET every number of the window's bucket in ``slot``."""
    for code, attribute in schema.BUCKET_CODES.items():
        write.set(schema.bucket_field(slot, code), getattr(bucket, attribute))
    return write


def add_to_bucket(write: Write, slot: int, added: Bucket) -> Write:
    """ADD ``added``'s counts to the bucket in ``slot`` (its idx is fenced, not written)."""
    for code, attribute in schema.BUCKET_CODES.items():
        if code != schema.BUCKET_INDEX:
            write.add(schema.bucket_field(slot, code), getattr(added, attribute))
    return write


def write_quorum(write: Write, record: Record) -> Write:
    """SET the quorum maps (a map attribute each) to ``record``'s."""
    for code, attribute in schema.QUORUM_CODES.items():
        write.set(code, getattr(record, attribute))
    return write
