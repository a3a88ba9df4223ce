"""One refresh per execution environment: the processes of one environment share their reads.

On Lambda Managed Instances one execution environment runs several Python processes (16 per
vCPU unless ``PerExecutionEnvironmentMaxConcurrency`` says otherwise), each with its own init.
Each process is a container to the breaker, as a Lambda execution environment is: its own id
in the quorum, its own tally, reports, census writes and failure writes. Its reads of the
record need not be its own: every process of an environment would read the same item for the
same view. So a process whose view is stale first looks at the environment's copy, a file in
the temporary directory the processes share (Lambda documents ``/tmp`` as shared between them,
and a lock for files they write together):

- a copy still fresh (as fresh as the process that read it would have kept its own view) is
  taken as that read's answer, at the time it was read: the staleness bound is the reader's,
  whoever takes it;
- otherwise the process that takes the copy's lock reads the store and writes the copy; a
  process that finds the lock taken acts on its last view until the copy is written (it looks
  again on its next call), and one that has no view yet reads the store itself.

Only reads are shared. A refresh that writes (a census write, a rate-policy report at the base
interval) is the process's own, as every count is. Degraded (the store out of reach), a
process answers from its local twin and neither reads nor writes the copy.

The copy is the record as JSON with its read time and freshness, written whole (a temporary
file renamed over it), so a reader sees the old copy or the new one; anything a process
cannot parse is no copy (it reads the store). The lock is ``flock`` on a file beside it: the
kernel drops it when its process dies, so a process killed mid-read blocks nobody.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fleetbreaker import record as schema
from fleetbreaker.frozen import frozen
from fleetbreaker.record import Bucket, CensusBucket, Lease, Record, State

if TYPE_CHECKING:
    from fleetbreaker.protocols import GuardedStore
    from fleetbreaker.view import RecordCache

# Set by Lambda on Managed Instances: the requests one execution environment takes at once
# (for Python, its processes). This module is the one reader of the variable.
CONCURRENCY_ENV = "AWS_LAMBDA_MAX_CONCURRENCY"
COPY_VERSION = 1
_LIMIT = 10**schema.MAX_RECORD_DIGITS

log = logging.getLogger("fleetbreaker")


def environment_directory(environ: Mapping[str, str] | None = None) -> str | None:
    """The directory the processes of this execution environment share their reads through:
    the temporary directory when Lambda runs more than one process in it (Managed
    Instances set ``AWS_LAMBDA_MAX_CONCURRENCY`` above 1); None elsewhere (one process per
    environment: nothing to share)."""
    env = os.environ if environ is None else environ
    try:
        concurrency = int(env.get(CONCURRENCY_ENV, "").strip())
    except ValueError:
        return None
    if concurrency <= 1:
        return None
    import tempfile  # not at import: a cold start elsewhere never needs it

    return tempfile.gettempdir()


def copy_key(store: object, name: str) -> str:
    """What names a breaker's copy: the store's kind and table (or key prefix), and the name.

    Two breakers of one name on two tables must not share a copy; the processes of one
    environment build their stores alike, so they agree on it.
    """
    kind = type(store)
    place = getattr(store, "table_name", None) or getattr(store, "key_prefix", None) or ""
    return f"{kind.__module__}.{kind.__qualname__}\0{place}\0{name}"


@frozen
class Shared:
    """The environment's copy: the record a process read at ``read_at``, fresh until
    ``fresh_until`` (epoch ms, as that process would have kept its own view)."""

    record: Record | None
    read_at: int
    fresh_until: int


class SharedCopy:
    """One breaker's copy in a directory the environment's processes share, and its lock."""

    def __init__(self, directory: str | os.PathLike[str], key: str) -> None:
        digest = hashlib.blake2s(key.encode("utf-8"), digest_size=12).hexdigest()
        self.path = os.path.join(os.fspath(directory), f"fleetbreaker-{digest}.json")
        self.lock_path = f"{self.path}.lock"
        self._lock_fd: int | None = None
        self._lock_pid = 0
        self._warned = False

    def get(self) -> Shared | None:
        """The copy, or None when there is none or it cannot be trusted."""
        try:
            with open(self.path, encoding="utf-8") as file:
                return decode_copy(json.load(file))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            self._warn("read", exc)
            return None

    def put(self, shared: Shared) -> None:
        """Write the copy whole: readers see the old one or this one, never a part."""
        import tempfile

        text = json.dumps(encode_copy(shared), separators=(",", ":"))
        directory = os.path.dirname(self.path)
        try:
            fd, temporary = tempfile.mkstemp(prefix=".fleetbreaker-", dir=directory)
            try:
                try:
                    # os.write may write less than asked (a full disk, a signal): a short
                    # copy renamed into place would be a torn one.
                    rest = memoryview(text.encode("utf-8"))
                    while rest:
                        rest = rest[os.write(fd, rest) :]
                finally:
                    os.close(fd)
                os.replace(temporary, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            self._warn("write", exc)

    def try_lock(self) -> bool:
        """Take the copy's lock without waiting; False when another process holds it (or the
        lock cannot be had: the caller then reads the store itself)."""
        import fcntl

        try:
            fd = self._lock_file()
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:
            self._warn("lock", exc)
            raise
        return True

    def unlock(self) -> None:
        import fcntl

        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def forget(self) -> None:
        """Close the lock file (after a restored snapshot: the descriptor is the snapshot's)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _lock_file(self) -> int:
        pid = os.getpid()
        if self._lock_fd is None or self._lock_pid != pid:
            # A forked child must not share its parent's lock (flock belongs to the open file).
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._lock_pid = pid
        return self._lock_fd

    def _warn(self, what: str, exc: BaseException) -> None:
        if self._warned:
            return
        self._warned = True
        log.warning(
            "fleetbreaker: cannot %s the shared view %s (%s: %s): this process reads the "
            "store itself when the copy fails it",
            what,
            self.path,
            type(exc).__name__,
            exc,
            extra={"breaker_event": "shared_view_error", "path": self.path},
        )


class SharedReads:
    """A breaker's reads of its record through the environment's copy (see the module doc).

    ``answered(record, at_ms)`` is the breaker's answer hook (the cache, the strategy's
    generation, live tuning): a copy taken from the file reaches it as a store answer given
    at the copy's read time. ``cache`` is the breaker's view cache, whose entry the copy
    takes and gives its freshness.
    """

    def __init__(
        self,
        name: str,
        store: GuardedStore,
        copy: SharedCopy,
        cache: RecordCache,
        answered: Callable[[Record | None, int], None],
    ) -> None:
        self.name = name
        self.copy = copy
        self._store = store
        self._cache = cache
        self._answered = answered

    def read(self, now_ms: int) -> Record | None:
        """The record at ``now_ms``: the environment's fresh copy, or one store read."""
        store = self._store
        if store.degraded:
            return store.load(self.name, now_ms)  # the local twin's: nothing to share
        entry = self._cache.entry
        shared = self.copy.get()
        if (
            shared is not None
            and shared.read_at <= now_ms < shared.fresh_until
            and not _older(shared, entry)
        ):
            self._answered(shared.record, shared.read_at)
            # Fresh for exactly as long as its reader kept it: the same staleness bound.
            self._cache.put(shared.record, shared.read_at, shared.fresh_until - shared.read_at)
            return shared.record
        try:
            locked = self.copy.try_lock()
        except OSError:
            return store.load(self.name, now_ms)
        if not locked:
            if entry is not None:
                # Another process of the environment is reading the store now. Not kept as
                # fresh: the next call looks at the copy again.
                return entry[0]
            return store.load(self.name, now_ms)
        try:
            record = store.load(self.name, now_ms)
            entry = self._cache.entry
            if not store.degraded and entry is not None and entry[0] is record:
                self.copy.put(Shared(record, entry[1], entry[2]))
            return record
        finally:
            self.copy.unlock()


def _older(shared: Shared, entry: tuple[Record | None, int, int] | None) -> bool:
    """Whether the copy is older than what this process last heard itself (its own report's
    or write's answer): read before it, or of an earlier generation (an eventually
    consistent read may return one). A view going back in time would fence the next report
    on a bucket the fleet has left, or show a trip undone."""
    if entry is None:
        return False
    seen = entry[0]
    if shared.read_at < entry[1]:
        return True
    return seen is not None and shared.record is not None and shared.record.gen < seen.gen


# -- the copy as JSON -----------------------------------------------------------------------


def encode_copy(shared: Shared) -> dict[str, Any]:
    record = shared.record
    return {
        "v": COPY_VERSION,
        "read_at": shared.read_at,
        "fresh_until": shared.fresh_until,
        "record": None if record is None else encode_record(record),
    }


def decode_copy(data: Any) -> Shared:
    """The copy ``data`` holds; ValueError (or TypeError, KeyError) when it is not one."""
    if not isinstance(data, dict) or data.get("v") != COPY_VERSION:
        raise ValueError("not a fleetbreaker shared view of this version")
    raw = data["record"]
    record = None if raw is None else decode_record(raw)
    return Shared(record, _int(data["read_at"]), _int(data["fresh_until"]))


def encode_record(record: Record) -> dict[str, Any]:
    """The record as JSON, its scalar fields under their stored names (the one schema)."""
    scalars: dict[str, Any] = {schema.STATE: record.state.value, schema.REV: record.rev}
    for attribute, name in _SCALARS.items():
        scalars[name] = getattr(record, attribute)
    return {
        "fields": scalars,
        "leases": [
            [slot, lease.token, lease.until, lease.since]
            for slot, lease in sorted(record.leases.items())
        ],
        "buckets": [
            [slot, b.idx, b.calls, b.failures, b.slow, b.reports]
            for slot, b in sorted(record.buckets.items())
        ],
        "census": [[slot, c.idx, c.count] for slot, c in sorted(record.census.items())],
        "quorum": [dict(record.failing), dict(record.slowing)],
    }


def decode_record(data: Any) -> Record:
    """The record ``data`` holds, every field checked as a store's answer is."""
    fields = data["fields"]
    # Any: the attributes' names come from the schema's tables, which type checkers cannot
    # follow.
    values: dict[str, Any] = {}
    for attribute, name in _SCALARS.items():
        raw = fields[name]
        values[attribute] = _text(raw) if attribute in schema.TEXT_FIELDS else _int(raw)
    leases = {}
    for slot, token, until, since in data["leases"]:
        leases[_slot(slot, schema.MAX_PROBE_SLOTS)] = Lease(
            _text(token), _int(until), None if since is None else _int(since)
        )
    buckets = {}
    for slot, idx, calls, failures, slow, reports in data["buckets"]:
        buckets[_slot(slot, schema.WINDOW_BUCKETS)] = Bucket(
            _int(idx), _count(calls), _count(failures), _count(slow), _count(reports)
        )
    census = {}
    for slot, idx, count in data["census"]:
        census[_slot(slot, schema.WINDOW_BUCKETS)] = CensusBucket(_int(idx), _count(count))
    failing, slowing = data["quorum"]
    return Record(
        state=State(fields[schema.STATE]),
        rev=_int(fields[schema.REV]),
        leases=leases,
        buckets=buckets,
        census=census,
        failing=_quorum(failing),
        slowing=_quorum(slowing),
        **values,
    )


# Record attribute -> stored name, for the record's integer and text fields.
_SCALARS = {**schema.NUMBER_FIELDS, **schema.OPTIONAL_NUMBER_FIELDS, **schema.TEXT_FIELDS}


def _int(value: Any) -> int:
    if type(value) is not int or not -_LIMIT < value < _LIMIT:
        raise ValueError(f"not an integer a record holds: {value!r}")
    return value


def _count(value: Any) -> int:
    if _int(value) < 0:
        raise ValueError(f"a negative count: {value!r}")
    return int(value)


def _slot(value: Any, slots: int) -> int:
    if not 0 <= _int(value) < slots:
        raise ValueError(f"no such slot: {value!r}")
    return int(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not text: {value!r}")
    return value


def _quorum(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ValueError(f"not a quorum map: {value!r}")
    return {_text(key): _int(at) for key, at in value.items()}
