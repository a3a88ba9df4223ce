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
  again on its next call) while that view is no older than it would keep it, and one that has
  no view yet (or an older one) reads the store itself.

Only reads are shared. A refresh that writes (a census write, a rate-policy report at the base
interval) is the process's own, as every count is. Degraded (the store out of reach), a
process answers from its local twin and neither reads nor writes the copy.

The copy is the record as JSON with its read time and freshness, written whole (a temporary
file renamed over it), so a reader sees the old copy or the new one; anything a process
cannot parse is no copy (it reads the store). The lock is ``flock`` on a file beside it: the
kernel drops it when its process dies, so a process killed mid-read blocks nobody.

What a process trusts the directory for (docs/deploying.md, "Shared reads: what the directory
is trusted for"): only to hand it a read that another process of its own user made of the same
store, no older than it would keep its own. So:

- the copy's name is the store's kind, its ``sharing_identity`` (region, endpoint and table;
  host, port, database and key prefix) and the breaker's name. A store that names no
  identity shares nothing (each process reads for itself);
- a copy is fresh for at most as long as this process would keep its own view
  (MAX_REFRESH_STRETCH times its ``cache_ttl``), whatever its ``fresh_until`` claims;
- the copy and the lock are opened without following a link, and used only when they are
  regular files of this process's effective user, with one link, writable by no one else
  (group or others); the lock is created only where no file is (O_EXCL);
- a process that takes the lock looks at the copy again before it reads the store: another
  process may have written it since its first look.

A check that fails means the store is read, and the reason is logged once (per breaker).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import stat
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fleetbreaker import record as schema
from fleetbreaker.calls import NO_ANSWERS, Answer
from fleetbreaker.frozen import frozen
from fleetbreaker.record import Bucket, CensusBucket, Lease, Outcome, Record, State
from fleetbreaker.view import MAX_REFRESH_STRETCH

if TYPE_CHECKING:
    from fleetbreaker.calls import Replied
    from fleetbreaker.protocols import GuardedStore
    from fleetbreaker.view import RecordCache

# Set by Lambda on Managed Instances: the requests one execution environment takes at once
# (for Python, its processes). This module is the one reader of the variable.
CONCURRENCY_ENV = "AWS_LAMBDA_MAX_CONCURRENCY"
COPY_VERSION = 1
# The attribute a store names the data it reaches by (see copy_key).
IDENTITY_ATTRIBUTE = "sharing_identity"
# A copy is a few KB of JSON: a bigger file is not one (and is not read whole).
MAX_COPY_BYTES = 256 * 1024
_LIMIT = 10**schema.MAX_RECORD_DIGITS
# Never follow a link; never block on a FIFO planted at the path; never leak into a child.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

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


def copy_key(store: object, name: str) -> str | None:
    """What names a breaker's copy: the store's kind, its ``sharing_identity``, the name.

    ``sharing_identity`` (IDENTITY_ATTRIBUTE) is a store's public account of the data it
    reaches: everything that makes two stores of one kind two fleets' (DynamoDB: region,
    endpoint and table; Redis: host, port or socket, database and key prefix). The
    processes of one environment build their stores alike, so they agree on it, and two
    stores that reach different data never do. A store without one (a custom store, a
    MemoryStore, a Redis client the store cannot see into) gets None: its processes share
    nothing, each reads for itself.
    """
    kind = type(store)
    kind_name = f"{kind.__module__}.{kind.__qualname__}"
    try:
        identity = getattr(store, IDENTITY_ATTRIBUTE, None)
    except Exception as exc:  # a store's property failing (no region): share nothing
        _note_unshared(kind_name, f"its {IDENTITY_ATTRIBUTE} failed ({type(exc).__name__}: {exc})")
        return None
    if not isinstance(identity, str) or not identity:
        _note_unshared(kind_name, f"it names no {IDENTITY_ATTRIBUTE}")
        return None
    return json.dumps([kind_name, identity, name])


_UNSHARED_NOTED: set[str] = set()


def _note_unshared(kind_name: str, why: str) -> None:
    """Say once per store kind that its processes read for themselves."""
    if kind_name in _UNSHARED_NOTED:
        return
    _UNSHARED_NOTED.add(kind_name)
    log.info(
        "fleetbreaker: the processes of this environment do not share their reads of a %s: "
        "%s (each process reads the store itself)",
        kind_name,
        why,
        extra={"breaker_event": "shared_view_off", "store": kind_name},
    )


class UntrustedFileError(OSError):
    """A file at the copy's (or the lock's) path that this process does not trust."""

    def __str__(self) -> str:
        return str(self.strerror)  # the reason alone, without "[Errno 1]"


@frozen
class Shared:
    """The environment's copy: the record a process read at ``read_at``, fresh until
    ``fresh_until`` (epoch ms, as that process would have kept its own view)."""

    record: Record | None
    read_at: int
    fresh_until: int


class SharedCopy:
    """One breaker's copy in a directory the environment's processes share, and its lock.

    ``key`` None (a store with no identity, see copy_key): no copy and no lock; ``enabled``
    is False and the reads are the process's own.
    """

    def __init__(self, directory: str | os.PathLike[str], key: str | None) -> None:
        self.enabled = key is not None
        digest = hashlib.blake2s((key or "").encode("utf-8"), digest_size=12).hexdigest()
        self.path = os.path.join(os.fspath(directory), f"fleetbreaker-{digest}.json")
        self.lock_path = f"{self.path}.lock"
        self._lock_fd: int | None = None
        self._lock_pid = 0
        self._warned = False

    def get(self) -> Shared | None:
        """The copy, or None when there is none or it cannot be trusted."""
        if not self.enabled:
            return None
        try:
            fd = _open_trusted(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._warn("read", exc)
            return None
        try:
            text = _read_all(fd)
            return decode_copy(json.loads(text))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            self._warn("read", exc)
            return None
        finally:
            os.close(fd)

    def put(self, shared: Shared) -> None:
        """Write the copy whole: readers see the old one or this one, never a part."""
        if not self.enabled:
            return
        import tempfile

        text = json.dumps(encode_copy(shared), separators=(",", ":"))
        directory = os.path.dirname(self.path)
        try:
            # mkstemp: a new file (O_EXCL, never through a link), mode 0600, ours.
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
                # rename replaces whatever is at the path, a link included, never its target.
                os.replace(temporary, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            self._warn("write", exc)

    def try_lock(self) -> bool:
        """Take the copy's lock without waiting; False when another process holds it. An
        OSError when the lock cannot be had or trusted: the caller then reads the store."""
        import fcntl

        if not self.enabled:
            raise UntrustedFileError(errno.ENOENT, "no shared copy for this store")
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
            self._lock_fd = _open_lock(self.lock_path)
            self._lock_pid = pid
        return self._lock_fd

    def _warn(self, what: str, exc: BaseException) -> None:
        if self._warned:
            return
        self._warned = True
        path = self.lock_path if what == "lock" else self.path
        log.warning(
            "fleetbreaker: cannot %s the shared view %s (%s: %s): this process reads the "
            "store itself when the copy fails it",
            what,
            path,
            type(exc).__name__,
            exc,
            extra={"breaker_event": "shared_view_error", "path": path},
        )


def _open_lock(path: str) -> int:
    """The lock file, ours: created new where nothing is (O_EXCL does not follow a link, so
    a link planted at the path makes no file where it points), else opened as it is, not
    through a link, and checked as the copy is."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
    except FileExistsError:
        return _open_trusted(path, os.O_RDWR)
    return fd


def _open_trusted(path: str, mode: int) -> int:
    """``path`` opened without following a link, when it is a file this process may trust:
    regular, of our effective user, one link, writable by nobody else. UntrustedFileError
    (an OSError) names what is off."""
    try:
        fd = os.open(path, mode | _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFileError(errno.ELOOP, "a symbolic link (not followed)") from None
        raise
    try:
        _check_trusted(os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_trusted(info: os.stat_result) -> None:
    # fstat of the open file, not stat of the path: what was checked is what is read.
    if not stat.S_ISREG(info.st_mode):
        raise UntrustedFileError(errno.EPERM, "not a regular file")
    euid = os.geteuid()
    if info.st_uid != euid:
        raise UntrustedFileError(
            errno.EPERM, f"owned by uid {info.st_uid}, not this process's uid {euid}"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UntrustedFileError(
            errno.EPERM, f"mode {stat.S_IMODE(info.st_mode):o}: writable by group or others"
        )
    if info.st_nlink != 1:
        raise UntrustedFileError(errno.EPERM, f"{info.st_nlink} hard links to it")


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_COPY_BYTES:
            raise ValueError(f"larger than a copy ({MAX_COPY_BYTES} bytes)")
        chunks.append(chunk)


class SharedReads:
    """A breaker's reads of its record through the environment's copy (see the module doc).

    Each read returns what it read with its answer, as a value, for the breaker's core (the
    cache, the strategy's generation, live tuning): a store read's answer at the time it was
    read, a copy taken from the file as a store answer given at the copy's read time and
    fresh for as long as its reader kept it. ``cache`` is the breaker's view cache: its entry
    tells whether a copy is older than this process's own view, and gives a copy this
    process writes its freshness.
    """

    def __init__(
        self,
        name: str,
        store: GuardedStore,
        copy: SharedCopy,
        cache: RecordCache,
    ) -> None:
        self.name = name
        self.copy = copy
        self._store = store
        self._cache = cache

    def read(
        self, now_ms: int, fresh_ms: Callable[[Record | None, int], int]
    ) -> Replied[Record | None]:
        """The record at ``now_ms``: the environment's fresh copy, or one store read; with
        its answer. ``fresh_ms(record, now_ms)`` is the counting strategy's: how long a
        store read this process makes stays fresh, here and in the copy it writes."""
        store = self._store
        if store.degraded:
            return self._load(now_ms)  # the local twin's: nothing to share
        if not self.copy.enabled or self._cache.ttl_ms <= 0:
            return self._load(now_ms)  # no copy to share, or no view kept
        entry = self._cache.entry
        shared = self._fresh_copy(now_ms, entry)
        if shared is not None:
            return self._take(shared)
        try:
            locked = self.copy.try_lock()
        except OSError:
            return self._load(now_ms)
        if not locked:
            if entry is not None and now_ms < entry[1] + self._longest_ms():
                # Another process of the environment is reading the store now. Not kept as
                # fresh: the next call looks at the copy again. Only while the view is no
                # older than this process would keep it: a holder that never lets go (stuck,
                # stopped) must not hold this process on an old view.
                return entry[0], NO_ANSWERS
            return self._load(now_ms)
        try:
            # Look again: the process that held the lock a moment ago may have written a
            # copy since this one's first look (one read for the environment, not two).
            shared = self._fresh_copy(now_ms, self._cache.entry)
            if shared is not None:
                return self._take(shared)
            return self._share(now_ms, fresh_ms)
        finally:
            self.copy.unlock()

    def _load(self, now_ms: int) -> Replied[Record | None]:
        """One store read: the record, and its answer for the breaker's core."""
        answer = self._store.read(self.name, now_ms)
        return answer.record, (Answer(answer, now_ms),)

    def _share(
        self, now_ms: int, fresh_ms: Callable[[Record | None, int], int]
    ) -> Replied[Record | None]:
        """One store read, written into the environment's copy (the lock is held), fresh
        for as long as this process keeps it: the same freshness its answer carries up to
        the core. Cached here first (the core's taking it again changes nothing), so the
        copy is written only when this process's view takes the read (not older than what
        it already holds)."""
        answer = self._store.read(self.name, now_ms)
        record = answer.record
        if answer.local or self._store.degraded:
            return record, (Answer(answer, now_ms),)
        fresh = fresh_ms(record, now_ms)
        self._cache.put(record, now_ms, fresh)
        entry = self._cache.entry
        if entry is not None and entry[0] is record:
            self.copy.put(Shared(record, entry[1], entry[2]))
        return record, (Answer(answer, now_ms, fresh_ms=fresh),)

    def _fresh_copy(
        self, now_ms: int, entry: tuple[Record | None, int, int] | None
    ) -> Shared | None:
        """The environment's copy when this process may take it at ``now_ms``: fresh by this
        process's own bound, and not older than its own view. Its ``fresh_until`` is then
        the bounded one."""
        shared = self.copy.get()
        if shared is None or _older(shared, entry):
            return None
        # Fresh for as long as its reader kept it, and never longer than this process would
        # keep its own view: the file's fresh_until is another process's word, not ours.
        fresh_until = min(shared.fresh_until, shared.read_at + self._longest_ms())
        if not shared.read_at <= now_ms < fresh_until:
            return None
        return Shared(shared.record, shared.read_at, fresh_until)

    def _longest_ms(self) -> int:
        """The longest this process keeps a view of its own: MAX_REFRESH_STRETCH x cache_ttl."""
        return round(MAX_REFRESH_STRETCH * self._cache.ttl_ms)

    def _take(self, shared: Shared) -> Replied[Record | None]:
        """The copy as this process's store answer, given at the copy's read time and fresh
        for exactly as long as its reader kept it: the same staleness bound."""
        fresh = shared.fresh_until - shared.read_at
        return shared.record, (Answer(Outcome(shared.record), shared.read_at, fresh_ms=fresh),)


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
