"""The shared record: its types, and the schema every store keeps it by.

Everything a store reads or writes is defined here: the record and the values the rules pass
around (:mod:`fleetbreaker.rules` holds the rules), the names of the record's parts in a store
(a Redis hash's fields, a DynamoDB item's attributes), the bucket and quorum codes, the
window's bucket count and the limits every store applies. Stores import this module and the
rules, nothing above them; RedisStore fills the schema into its Lua scripts, so the names
are spelled here only.

Adding a field to the record is an edit here (the attribute, its stored name) and to the rule
that sets it: docs/architecture.md, "Adding a field to the record".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from enum import Enum
from typing import Any

from fleetbreaker.frozen import frozen

# Probe slots a record can hold: BreakerConfig caps half_open_max_probes here, and the stores
# (DynamoDB attributes, the Redis scripts) read this many.
MAX_PROBE_SLOTS = 16

# The rate policy's sliding window is a ring of this many buckets (each window_ms / 10 long):
# the window slides in tenths, and the record stays a few hundred bytes at any fleet size.
WINDOW_BUCKETS = 10

# The integers a store trusts in a record: at most this many digits, with an optional minus.
# Redis' Lua computes in doubles and prints integers past 14 digits in exponent form, so every
# store applies the same bound; a value past it (or fractional) makes the record corrupt.
# Counters never get near it (10^14 transitions), and a hand-edited one then reads as closed
# and is replaced by the next write, like any other corrupt record.
MAX_RECORD_DIGITS = 14
# The largest census count a store keeps: a census slice stops there, for one digit more
# would make the record corrupt (and a census write must never make a record unreadable).
MAX_CENSUS_COUNT = 10**MAX_RECORD_DIGITS - 1

# Lease tokens this package issues are short ASCII ("<slot>-<nonce>").
MAX_TOKEN_CHARS = 64


class _Word(str, Enum):
    """A str enum that prints as its value ("open", not "State.OPEN")."""

    def __str__(self) -> str:
        return str.__str__(self)


class State(_Word):
    """The state of a breaker, shared by the whole fleet."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    FORCED_OPEN = "forced_open"
    DISABLED = "disabled"


class Decision(_Word):
    """What a breaker decided for one call."""

    ALLOW = "allow"
    PROBE = "probe"
    REJECT = "reject"


class TransitionReason(_Word):
    """Why the breaker changed state (what a log, a metric or a tracer shows with a transition)."""

    FAILURE_THRESHOLD = "failure_threshold"  # count policy: failures reached the threshold
    FAILURE_RATE = "failure_rate"  # rate policy: failures / calls reached the threshold
    SLOW_CALL_RATE = "slow_call_rate"  # slow calls / calls reached the threshold
    OPEN_WINDOW_ELAPSED = "open_window_elapsed"  # open -> half_open: the first probe claimed
    PROBE_SUCCEEDED = "probe_succeeded"  # half_open -> closed
    PROBE_FAILED = "probe_failed"  # half_open -> open, with a longer open window
    OPERATOR = "operator"  # forced open, disabled or reset


@frozen
class Lease:
    """A probe slot held by one caller until ``until`` (epoch ms).

    ``since`` is when it was granted, on the claimer's clock (None: not recorded).
    """

    token: str
    until: int
    since: int | None = None


@frozen
class Bucket:
    """One slice of the rate policy's sliding window: the calls reported in it.

    ``idx`` is the slice's absolute number (epoch ms // bucket length), so a slot of the ring
    whose ``idx`` is old holds counts that have left the window.
    """

    idx: int
    calls: int = 0
    failures: int = 0
    slow: int = 0
    reports: int = 0


@frozen
class CensusBucket:
    """One slice of the census ring: the census writes the fleet sent in it.

    A count-policy fleet writes nothing while healthy, so each container now and then sends
    a census write instead of a refresh read (:mod:`fleetbreaker.census`): how many arrive
    per second tells the fleet's size. They are counted apart from the rate policy's calls
    (a census write is no call) and kept across state changes (the fleet's size does not
    change when the breaker trips). ``idx`` is the slice's absolute number, as a Bucket's.
    """

    idx: int
    count: int = 0


@frozen
class Report:
    """What one container reports in one write: its calls since its last report.

    ``container`` is the id the quorum counts. A call still running past
    ``slow_call_duration`` is reported as a call and a slow call; when it ends it adds only
    its failure, if any. ``gen`` is the generation the calls were admitted under: a store
    counts them only into that generation's window (None: into whichever is current), so
    failures held from before a trip never land in the window after the recovery.
    """

    container: str
    calls: int = 0
    failures: int = 0
    slow: int = 0
    gen: int | None = None

    def __bool__(self) -> bool:
        return bool(self.calls or self.failures or self.slow)


@frozen
class Record:
    """One breaker's shared state, as every store keeps it.

    Times are epoch milliseconds except ``expires_at``, which is epoch seconds because
    DynamoDB's TTL wants seconds. ``gen`` grows by one on every state change, so a write
    fenced on the generation it observed cannot land on a later state. ``opened_at`` is when
    the current outage began: an open record sets it, and the closed record that ends the
    outage keeps it. ``closed_at`` is when a recovery closed the breaker (a probe's success,
    or an operator's reset of an open breaker), 0 otherwise: every write of that generation
    keeps it, so every container ramps from the same moment however late it first sees the
    record. ``window_ms`` is the window of the policy that last counted into the record (0:
    not known), so an operator's tools need not be told it.

    ``tuned`` (live settings, a JSON object) and ``last_action`` (the last operator action, a
    JSON object) are kept as the store holds them, as text: state changes carry them over
    untouched, and :mod:`fleetbreaker.tuning` reads them ("" means none).
    """

    state: State = State.CLOSED
    gen: int = 0
    failures: int = 0
    window_start: int = 0
    opened_at: int = 0
    open_until: int = 0
    reopens: int = 0
    successes: int = 0
    leases: Mapping[int, Lease] = field(default_factory=dict)
    updated_at: int = 0
    expires_at: int = 0
    tuned: str = ""
    last_action: str = ""
    # Rate policy, slow calls and quorum (empty under the plain count policy): the sliding
    # window's ring of buckets by slot, and the containers whose failures / slow calls fall in
    # the window (id -> epoch ms of the latest), at most ``min_containers`` of each.
    buckets: Mapping[int, Bucket] = field(default_factory=dict)
    failing: Mapping[str, int] = field(default_factory=dict)
    slowing: Mapping[str, int] = field(default_factory=dict)
    # Bumped by every rewrite of the quorum maps: DynamoDB fences such a rewrite on it.
    rev: int = 0
    closed_at: int = 0
    window_ms: int = 0
    # The census ring by slot (both policies keep it; state changes carry it over).
    census: Mapping[int, CensusBucket] = field(default_factory=dict)

    def is_expired(self, now_ms: int) -> bool:
        """Past its TTL: DynamoDB may still return it, but it counts as absent."""
        return self.expires_at * 1000 <= now_ms


@frozen
class ProbeReport:
    """A probe's result, as its caller reports it to ``settle_probe``.

    ``jitter`` is a factor in (0, 1] drawn by the caller: it shortens a grown open window if
    the probe failed (see :func:`fleetbreaker.policy.open_duration_ms`). ``released``: the
    probe's call was cancelled; its slot is freed with no verdict (``success`` is ignored).
    """

    token: str
    success: bool
    jitter: float = 1.0
    # No verdict: the probe's call was cancelled. Its lease is given back, nothing counted.
    released: bool = False


@frozen
class Outcome:
    """What a store operation did and the record it left behind.

    ``record`` is the store's view after the operation (None: no record, i.e. closed);
    ``changed`` says whether this operation wrote; ``transition`` the state change it made;
    ``token`` the lease token of a granted probe claim. ``retry_after_ms``: a store that
    decides on its own clock (Redis' TIME) and refused a claim says how long, on that clock,
    until one can succeed; the caller then stops asking until then, whatever its own clock says.
    ``local``: answered by a breaker's local twin while the shared store is out of reach
    (:class:`~fleetbreaker.stores.fallback.FallbackStore`): this container's alone, not the
    fleet's record, so it is never cached as the fleet's.
    """

    record: Record | None
    changed: bool = False
    transition: tuple[State, State] | None = None
    token: str | None = None
    retry_after_ms: int | None = None
    local: bool = False

    def __init__(
        self,
        record: Record | None,
        changed: bool = False,
        transition: tuple[State, State] | None = None,
        token: str | None = None,
        retry_after_ms: int | None = None,
        local: bool = False,
    ) -> None:
        # Written out: every store answer is one, and frozen's shared __init__ costs twice
        # this. The fields in order, with their defaults (tests/unit/test_frozen.py).
        fields = self.__dict__
        fields["record"] = record
        fields["changed"] = changed
        fields["transition"] = transition
        fields["token"] = token
        fields["retry_after_ms"] = retry_after_ms
        fields["local"] = local


@frozen
class Action:
    """One operator action on a breaker: what was done, by whom, why, and when (epoch ms).

    Stored with the record as JSON text (``Record.last_action``), so every store keeps it
    the same way.
    """

    action: str
    by: str
    reason: str | None
    at: int

    def encode(self) -> str:
        import json  # operator actions are rare: keep json off the breaker's import

        value = {"action": self.action, "at": self.at, "by": self.by, "reason": self.reason}
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Action | None:
        """The action stored as ``text``; None for "" or text that is not an action."""
        if not text:
            return None
        import json

        try:
            raw = json.loads(text)
        except ValueError:
            return None
        if not isinstance(raw, dict):
            return None
        action, by, reason, at = (raw.get(k) for k in ("action", "by", "reason", "at"))
        if not isinstance(action, str) or not isinstance(by, str):
            return None
        if reason is not None and not isinstance(reason, str):
            return None
        if isinstance(at, bool) or not isinstance(at, int):
            return None
        return cls(action, by, reason, at)


# -- the schema: what each part of a record is called in a store ---------------------------
# A store keeps a record as flat fields (a Redis hash, a DynamoDB item). Their names are
# spelled in this block and nowhere else: the stores read them from here, and RedisStore
# fills them into its Lua scripts. Each stored name is the Record attribute's name.

STATE = "state"
GEN = "gen"
FAILURES = "failures"
WINDOW_START = "window_start"
OPENED_AT = "opened_at"
OPEN_UNTIL = "open_until"
REOPENS = "reopens"
SUCCESSES = "successes"
UPDATED_AT = "updated_at"
EXPIRES_AT = "expires_at"  # epoch seconds: DynamoDB's TTL attribute
TUNED = "tuned"
LAST_ACTION = "last_action"
# DynamoDB only: the fence of a quorum map rewrite (Redis scripts run alone, so need none).
REV = "rev"
CLOSED_AT = "closed_at"
WINDOW_MS = "window_ms"

# The record's integer fields, Record attribute -> stored name. A record without one of them,
# or with one that is not an integer of at most MAX_RECORD_DIGITS digits, is corrupt.
NUMBER_FIELDS: dict[str, str] = {
    "gen": GEN,
    "failures": FAILURES,
    "window_start": WINDOW_START,
    "opened_at": OPENED_AT,
    "open_until": OPEN_UNTIL,
    "reopens": REOPENS,
    "successes": SUCCESSES,
    "updated_at": UPDATED_AT,
    "expires_at": EXPIRES_AT,
}
# Integer fields added after the first release, Record attribute -> stored name: a record
# written before them reads them as 0 (absent, or not a number), so a fleet can upgrade
# while its records live. A value that is a number but not one the package trusts (see
# MAX_RECORD_DIGITS) still makes the record corrupt.
OPTIONAL_NUMBER_FIELDS: dict[str, str] = {"closed_at": CLOSED_AT, "window_ms": WINDOW_MS}
# Operator fields, Record attribute -> stored name: text a state change carries over untouched
# (absent means "").
TEXT_FIELDS: dict[str, str] = {"tuned": TUNED, "last_action": LAST_ACTION}

# A probe slot's lease: the token, the expiry and the grant time, each a field of its own.
LEASE_PARTS = ("token", "until", "since")

# How stores name a bucket's numbers: w<slot>_<code> (DynamoDB attributes, Redis fields),
# code -> Bucket attribute. BUCKET_INDEX is the code of the bucket's idx.
BUCKET_INDEX = "i"
BUCKET_CODES = {BUCKET_INDEX: "idx", "c": "calls", "f": "failures", "s": "slow", "r": "reports"}
# The quorum maps: a DynamoDB map attribute named by the code; in Redis one field per
# container, "<code><QUORUM_SEPARATOR><container id>".
QUORUM_CODES = {"fq": "failing", "sq": "slowing"}
QUORUM_SEPARATOR = ":"
# The census ring: n<slot>_<code>, code -> CensusBucket attribute (CENSUS_INDEX: the idx).
CENSUS_INDEX = "i"
CENSUS_COUNT = "n"
CENSUS_CODES = {CENSUS_INDEX: "idx", CENSUS_COUNT: "count"}

# Record attributes by kind, for code that walks the record (the fields not listed here are
# the structured ones above: leases, buckets, the quorum maps, and rev).
RECORD_NUMBERS = (*NUMBER_FIELDS, *OPTIONAL_NUMBER_FIELDS)
RECORD_TEXTS = tuple(TEXT_FIELDS)


def lease_fields(slot: int) -> tuple[str, str, str]:
    """The stored names of a probe slot's token, expiry and grant time (LEASE_PARTS)."""
    token, until, since = (f"probe{slot}_{part}" for part in LEASE_PARTS)
    return token, until, since


def bucket_field(slot: int, code: str) -> str:
    """The stored name of one number (BUCKET_CODES) of the window's bucket in ``slot``."""
    return f"w{slot}_{code}"


def census_field(slot: int, code: str) -> str:
    """The stored name of one number (CENSUS_CODES) of the census ring's slice in ``slot``."""
    return f"n{slot}_{code}"


def quorum_field(code: str, container: str) -> str:
    """Redis' field for one container of a quorum map (DynamoDB keeps the map whole)."""
    return f"{code}{QUORUM_SEPARATOR}{container}"


def parse_window(
    number: Callable[[str], int | None], quorum: Mapping[str, Mapping[str, int]]
) -> dict[str, Any]:
    """The window and census fields of a Record from a store's raw values (every store's).

    ``number(field)`` gives a stored integer or None. A bucket (or census slice) with any
    part missing or negative is dropped: it reads as empty, never as a crash or a trip.
    """
    buckets: dict[int, Bucket] = {}
    census: dict[int, CensusBucket] = {}
    for slot in range(WINDOW_BUCKETS):
        parts = {name: number(bucket_field(slot, code)) for code, name in BUCKET_CODES.items()}
        if _whole(parts):
            buckets[slot] = Bucket(**parts)  # type: ignore[arg-type]
        ring = {name: number(census_field(slot, code)) for code, name in CENSUS_CODES.items()}
        if _whole(ring):
            census[slot] = CensusBucket(**ring)  # type: ignore[arg-type]
    quorums = {QUORUM_CODES[code]: dict(m) for code, m in quorum.items()}
    return {"buckets": buckets, "census": census, **quorums}


def _whole(parts: Mapping[str, int | None]) -> bool:
    """Every part present, and every count (all but idx) non-negative."""
    return all(value is not None and (name == "idx" or value >= 0) for name, value in parts.items())
