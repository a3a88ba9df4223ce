"""The DynamoDB store: one item per breaker, every change one conditional UpdateItem.

Each operation starts from the caller's observed record to choose a write and fences that
write on what it assumed (state, generation, window or lease token). When the condition
fails, DynamoDB hands back the current item (ReturnValuesOnConditionCheckFailure=ALL_OLD),
and the operation re-plans from it: no read-modify-write, no lost updates, and a lost race
still teaches the caller the current state in the same round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetbreaker import record as schema
from fleetbreaker import rules
from fleetbreaker.errors import ConfigError, CorruptRecordError, StoreError
from fleetbreaker.policy import Policy
from fleetbreaker.record import (
    MAX_CENSUS_COUNT,
    MAX_PROBE_SLOTS,
    WINDOW_BUCKETS,
    Bucket,
    Outcome,
    ProbeReport,
    Record,
    Report,
    State,
)
from fleetbreaker.stores.base import Listing, StoreStats
from fleetbreaker.stores.dynamodb.codec import (
    KEY_ATTRIBUTE,
    Write,
    add_to_bucket,
    holding,
    parse_item,
    parse_or_corrupt,
    scalar,
    since_name,
    slot_names,
    write_bucket,
    write_census,
    write_fresh,
    write_quorum,
    write_record,
    write_window,
)
from fleetbreaker.stores.dynamodb.wire import Wire
from fleetbreaker.stores.variables import TABLE_ENV, default_table_name

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from botocore.config import Config
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from fleetbreaker.record import Action

# A report that also rewrites the quorum map tries that many times; later attempts send its
# counts alone (see DynamoDBStore.report).
_MAP_ATTEMPTS = 3


def _unreadable(name: str, item: dict[str, Any], now_ms: int) -> CorruptRecordError:
    """The CorruptRecordError an operation that may not replace ``item`` raises: why the item
    cannot be read, and that it was left as it is."""
    try:
        parse_item(item, now_ms)
        reason = "not a record"  # parse_or_corrupt refused it: parse_item says why
    except CorruptRecordError as exc:
        reason = str(exc)
    return CorruptRecordError(
        f"breaker {name!r}: {reason} (a census write left it as it is: the next counted "
        "write or an operator's reset replaces it)"
    )


def _alive(observed: Record | None, now_ms: int) -> Record | None:
    """The caller's view, unless it is past its TTL (then the item counts as absent)."""
    return None if observed is None or observed.is_expired(now_ms) else observed


class _Step:
    """One planned fenced write, and the outcome it gives once applied."""

    __slots__ = ("done", "mine", "write")

    def __init__(
        self,
        write: Write,
        done: Callable[[Record | None], Outcome],
        mine: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.write = write
        self.done = done
        # Tells a re-sent write's own effect in the item that stopped it (Wire.update).
        self.mine = mine


if TYPE_CHECKING:
    # A plan: (record last seen, raw item when corrupt, attempt) -> the write, or done.
    _Plan = Callable[[Record | None, dict[str, Any] | None, int], _Step | Outcome]
    _GiveUp = Callable[[Record | None], Outcome]


def _changed(
    transition: tuple[State, State] | None, token: str | None = None
) -> Callable[[Record | None], Outcome]:
    """The ``done`` of a write whose effect is its whole outcome: the record it left."""
    return lambda record: Outcome(record, changed=True, transition=transition, token=token)


# What an operation does when its write keeps losing races. The breaker's own operations
# give up quietly with the latest record: it is fresh (the lost race returned it), the
# protected call has already run, and a record that changes this often is being moved by
# other containers making the same transitions. An operator's write raises: the person who
# typed the command must learn that it did not take effect.


def _keep_latest(seen: Record | None) -> Outcome:
    """Give up quietly: nothing changed, here is the record that won."""
    return Outcome(seen)


def _keep_latest_changed(seen: Record | None) -> Outcome:
    """Give up quietly after a write that did land earlier in the operation (a trip after
    its failure was counted): the count changed the record, the trip was someone else's."""
    return Outcome(seen, changed=True)


def _refuse(what: str) -> _GiveUp:
    """Give up loudly: a StoreError saying ``what`` could not be done."""

    def gave_up(seen: Record | None) -> Outcome:
        raise StoreError(f"{what}: it keeps changing")

    return gave_up


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
        Whether ``load`` (the cache's refresh read) is strongly consistent. Default False:
        half a read unit, staleness bounded by ``cache_ttl`` (every write is fenced and
        returns the fresh record). Reads that decide a write are always strongly consistent.
    region_name:
        The table's region. Default: ``boto_config``'s, else ``AWS_REGION``, else
        ``AWS_DEFAULT_REGION`` (which alone the pinned boto3 reads), else boto3's own
        resolution (a profile's region).

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
        consistent_read: bool = False,
        region_name: str | None = None,
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
        self._wire = Wire(
            table,
            self.stats,
            client=boto3_client,
            boto_config=boto_config,
            endpoint_url=endpoint_url,
            region_name=region_name,
        )
        self._wire.configured_by = TABLE_ENV if table_name is None else "table_name"

    @property
    def client(self) -> DynamoDBClient:
        return self._wire.client

    @property
    def sharing_identity(self) -> str:
        """The region, endpoint and table this store reaches (see
        :mod:`fleetbreaker.stores.identity`). Builds the client (no request)."""
        # At use, not import: only Managed Instances ask (a cold start elsewhere never does).
        from fleetbreaker.stores.identity import dynamodb_identity

        return dynamodb_identity(self.client, self.table_name)

    @property
    def configured_by(self) -> str:
        """What named the table (``CIRCUIT_BREAKER_TABLE`` or ``table_name``): the errors of
        a misconfigured store (:class:`~fleetbreaker.errors.StoreMisconfiguredError`) name it."""
        return self._wire.configured_by

    @configured_by.setter
    def configured_by(self, setting: str) -> None:
        self._wire.configured_by = setting

    def translate(self, exc: Exception) -> StoreError:
        """The store error a failed request on this table becomes (a
        :class:`~fleetbreaker.errors.StoreMisconfiguredError` when a setting must change)."""
        return self._wire.translate(exc)

    def prepare(self) -> None:
        """Build the client now (no request): the breaker calls this before the first store
        operation, so boto3's setup does not count against the store deadline."""
        self._wire.prepare()

    def drop_connections(self) -> None:
        """Close the client's pooled connections (after a restored snapshot: they belong to
        another process's time); its next request opens a new one. No request is sent."""
        self._wire.drop_connections()

    def _get(self, name: str) -> dict[str, Any] | None:
        """A read that decides a write (settle, override, tune): strongly consistent."""
        return self._wire.get(name, consistent=True)

    # -- the contract ----------------------------------------------------------------------

    def load(self, name: str, now_ms: int) -> Record | None:
        # The cache's refresh read: eventually consistent unless asked (see the class).
        return parse_item(self._wire.get(name, consistent=self.consistent_read), now_ms)

    def _fenced_write(
        self,
        name: str,
        now_ms: int,
        seen: Record | None,
        plan: _Plan,
        *,
        attempts: int,
        gave_up: _GiveUp,
        corrupt: dict[str, Any] | None = None,
        counts: bool = False,
    ) -> Outcome:
        """The store's one write loop: plan, send the fenced write, re-plan on a lost race.

        ``plan`` turns the record last seen (and the raw item when it is corrupt, and the
        attempt number) into either a finished ``Outcome`` (nothing to write) or a ``_Step``.
        A write that applies ends the loop with its step's ``done``; one whose fence fails
        re-plans from the item DynamoDB returned with the failure. After ``attempts`` lost
        races the operation's ``gave_up`` decides: the breaker's own operations keep the
        latest record (``_keep_latest``), the operator's raise (``_refuse``).
        ``counts`` marks writes that add to a count (never re-sent blindly, see wire.py).
        """
        for attempt in range(attempts):
            step = plan(seen, corrupt, attempt)
            if isinstance(step, Outcome):
                return step
            applied, item = self._wire.update(name, step.write, step.mine, counts=counts)
            record, corrupt = parse_or_corrupt(item, now_ms)
            if applied:
                return step.done(record)
            seen = record
        return gave_up(seen)

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome:
        def plan(seen: Record | None, corrupt: dict[str, Any] | None, _: int) -> _Step | Outcome:
            planned = rules.apply_failure(seen, policy, now_ms, weight)
            if not planned.changed or planned.record is None:
                return Outcome(seen)
            write = Write(now_ms, policy)
            if seen is None:
                # Absent, expired or corrupt: write a whole fresh record over it.
                write_fresh(write, planned.record, corrupt)
                return _Step(write, _changed(planned.transition))
            write.require(write.usable()).require(write.is_(schema.STATE, State.CLOSED.value))
            write.require(write.is_(schema.GEN, seen.gen))
            write.require(write.is_(schema.WINDOW_START, seen.window_start))
            if seen.window_start and now_ms - seen.window_start < policy.window_ms:
                # ADD, not SET: concurrent failures in one window all count.
                write.add(schema.FAILURES, weight)
            else:
                write.set(schema.FAILURES, weight).set(schema.WINDOW_START, now_ms)

            def counted(record: Record | None) -> Outcome:
                if record is None or record.failures < policy.failure_threshold:
                    return Outcome(record, changed=True)
                return self._trip(name, policy, now_ms, record, record.failures)

            return _Step(write, counted)

        seen = _alive(observed, now_ms)
        return self._fenced_write(
            name, now_ms, seen, plan, attempts=4, gave_up=_keep_latest, counts=True
        )

    def _trip(
        self, name: str, policy: Policy, now_ms: int, counted: Record, failures: int
    ) -> Outcome:
        # Many callers can see the count reach the threshold; the generation fence lets
        # exactly one of them open the breaker. The others lose the race once and keep the
        # record that stopped them (their count did land: changed).
        def plan(seen: Record | None, _: dict[str, Any] | None, __: int) -> _Step:
            opened = rules.trip(counted, policy, now_ms, failures)
            write = write_record(Write(now_ms, policy), opened).add(schema.GEN, 1)
            write.remove_leases(range(MAX_PROBE_SLOTS))
            write.require(write.usable()).require(write.is_(schema.STATE, State.CLOSED.value))
            write.require(write.is_(schema.GEN, counted.gen))
            return _Step(write, _changed((State.CLOSED, State.OPEN)))

        return self._fenced_write(
            name, now_ms, counted, plan, attempts=1, gave_up=_keep_latest_changed
        )

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        def plan(seen: Record | None, _: dict[str, Any] | None, __: int) -> _Step | Outcome:
            planned = rules.apply_claim(seen, policy, now_ms, nonce)
            if planned.token is None or planned.record is None or seen is None:
                return Outcome(seen)
            token = planned.token
            slot = rules.lease_slot(token)
            assert slot is not None  # make_token wrote it
            token_name, until_name = slot_names(slot)
            write = Write(now_ms, policy)
            write.require(write.usable()).require(write.is_(schema.GEN, seen.gen))
            lease = planned.record.leases[slot]
            write.set(token_name, token).set(until_name, lease.until)
            write.set(since_name(slot), now_ms)
            if planned.transition is not None:  # open -> half_open: the first lease
                write.set(schema.STATE, planned.record.state.value)
                write.set(schema.SUCCESSES, planned.record.successes).add(schema.GEN, 1)
                write.remove_leases(range(1, MAX_PROBE_SLOTS))
                write.require(write.is_(schema.STATE, State.OPEN.value))
                write.require(f"{write.name(schema.OPEN_UNTIL)} <= {write.value(now_ms)}")
            else:
                write.require(write.is_(schema.STATE, State.HALF_OPEN.value))
                held_until = write.name(until_name)
                # A slot whose expiry is not a number is free (parse_item agrees), and so is
                # one whose lease has ended on this clock (rules.lease_ended).
                future = now_ms + rules.CLOCK_TOLERANCE_MS
                write.require(
                    f"NOT attribute_type({held_until}, {write.value('N')})"
                    f" OR {held_until} <= {write.value(now_ms)}"
                    f" OR {write.name(since_name(slot))} > {write.value(future)}"
                )
            granted = _changed(planned.transition, token)
            return _Step(write, granted, mine=holding(token_name, token))

        seen = _alive(observed, now_ms)
        attempts = policy.max_probes + 2
        return self._fenced_write(name, now_ms, seen, plan, attempts=attempts, gave_up=_keep_latest)

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        token = report.token
        slot = rules.lease_slot(token)
        if slot is None:
            return Outcome(observed)
        token_name, until_name = slot_names(slot)
        lease_names = (token_name, until_name, since_name(slot))

        def plan(seen: Record | None, _: dict[str, Any] | None, __: int) -> _Step | Outcome:
            if not rules.holds_lease(seen, token, now_ms):
                return Outcome(seen)
            assert seen is not None
            planned = rules.apply_settle(seen, policy, now_ms, report)
            after = planned.record
            assert after is not None
            write = Write(now_ms, policy)
            write.require(write.usable()).require(write.is_(schema.STATE, State.HALF_OPEN.value))
            write.require(write.is_(schema.GEN, seen.gen)).require(write.is_(token_name, token))
            write.require(f"{write.name(until_name)} > {write.value(now_ms)}")
            # Concurrent successes of several probes must add up, not overwrite each other.
            write.require(write.is_(schema.SUCCESSES, seen.successes))
            if planned.transition is None:
                write.set(schema.SUCCESSES, after.successes)
                write.removes.extend(write.name(a) for a in lease_names)
            else:
                write_record(write, after).add(schema.GEN, 1).remove_leases(range(MAX_PROBE_SLOTS))
            return _Step(write, _changed(planned.transition))

        seen = _alive(observed, now_ms)
        if not rules.holds_lease(seen, token, now_ms):
            # The caller's view may predate its own claim (a workflow's later step): ask.
            seen, _ = parse_or_corrupt(self._get(name), now_ms)
        attempts = policy.max_probes + 2
        return self._fenced_write(name, now_ms, seen, plan, attempts=attempts, gave_up=_keep_latest)

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
        idx = rules.sliding_window(policy).index(now_ms)
        slot = idx % WINDOW_BUCKETS

        def plan(
            seen: Record | None, corrupt: dict[str, Any] | None, attempt: int
        ) -> _Step | Outcome:
            planned = rules.apply_report(seen, policy, now_ms, report)
            if not planned.changed or planned.record is None:
                return Outcome(seen)
            write = Write(now_ms, policy)
            if seen is None:
                after = planned.record
                write_fresh(write, after, corrupt)
                if planned.transition is None:
                    write_window(write, after)
                return _Step(write, _changed(planned.transition))
            write.require(write.usable()).require(write.is_(schema.STATE, State.CLOSED.value))
            if report.gen is not None:
                write.require(write.is_(schema.GEN, seen.gen))
            counted = rules.sliding_window(policy).add(seen, now_ms, report)
            bucket = counted.buckets[slot]
            index = schema.bucket_field(slot, schema.BUCKET_INDEX)
            held = seen.buckets.get(slot)
            if held is not None and held.idx == idx:
                write.require(write.is_(index, idx))
                added = Bucket(idx, report.calls, report.failures, report.slow, reports=1)
                add_to_bucket(write, slot, added)
            else:
                # The slot holds an older bucket (or none): start this one over it.
                if held is None:
                    write.require(f"NOT attribute_type({write.name(index)}, {write.value('N')})")
                else:
                    write.require(write.is_(index, held.idx))
                write_bucket(write, slot, bucket)
            noting = counted.failing != seen.failing or counted.slowing != seen.slowing
            if noting and attempt < _MAP_ATTEMPTS:
                write_quorum(write, counted).set(schema.REV, seen.rev + 1)
                rev = write.name(schema.REV)
                write.require(
                    f"attribute_not_exists({rev})"
                    if seen.rev == 0
                    else write.is_(schema.REV, seen.rev)
                )
            return _Step(write, reported)

        def reported(record: Record | None) -> Outcome:
            counts = rules.sliding_window(policy).counts(record, now_ms)
            if record is None or not rules.sliding_window(policy).trips(counts):
                return Outcome(record, changed=True)
            return self._trip(name, policy, now_ms, record, counts.failures)

        return self._fenced_write(
            name, now_ms, seen, plan, attempts=6, gave_up=_keep_latest, counts=True
        )

    def census(self, name: str, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        # One ADD to the current slice of the census ring, fenced on the slice and on the
        # state (the TTL written depends on it): census writes commute with each other and
        # change nothing a transition is fenced on, so they never make a breaker's own writes
        # retry. Starting a slice, or an absent or expired item, re-plans. A census write
        # never replaces an item it cannot read, nor leaves one: that item may hold an open
        # breaker, which only a counted write or an operator may replace.
        idx, slot = rules.census_slot(policy, now_ms)

        def plan(seen: Record | None, corrupt: dict[str, Any] | None, _: int) -> _Step:
            if seen is None and corrupt is not None:
                raise _unreadable(name, corrupt, now_ms)
            planned = rules.apply_census(seen, policy, now_ms)
            after = planned.record
            assert after is not None
            if seen is None:
                fresh = write_fresh(Write(now_ms, policy), after, None)
                return _Step(fresh.require(fresh.absent_or_expired()), counted)
            write = Write(now_ms, policy, seen.state)
            write.require(write.usable()).require(write.is_(schema.STATE, seen.state.value))
            index = schema.census_field(slot, schema.CENSUS_INDEX)
            count = schema.census_field(slot, schema.CENSUS_COUNT)
            held = seen.census.get(slot)
            if held is not None and held.idx == idx:
                write.require(write.is_(index, idx))
                if held.count < MAX_CENSUS_COUNT:
                    # One past the bound would make the item corrupt: a full slice stays full.
                    write.require(f"{write.name(count)} < {write.value(MAX_CENSUS_COUNT)}")
                    write.add(count, 1)
                else:
                    write.require(write.is_(count, MAX_CENSUS_COUNT))
            else:
                if held is None:
                    write.require(f"NOT attribute_type({write.name(index)}, {write.value('N')})")
                else:
                    write.require(write.is_(index, held.idx))
                write_census(write, slot, after.census[slot])
            return _Step(write, counted)

        def counted(record: Record | None) -> Outcome:
            if record is None:  # applied, so the item exists: one it cannot read
                raise CorruptRecordError(
                    f"breaker {name!r}: the item a census write left cannot be read"
                )
            return Outcome(record, changed=True)

        seen = _alive(observed, now_ms)
        return self._fenced_write(
            name, now_ms, seen, plan, attempts=4, gave_up=_keep_latest, counts=True
        )

    def force_state(
        self, name: str, policy: Policy, now_ms: int, target: State, *, action: Action | None = None
    ) -> Outcome:
        # Operator actions are rare, so one read first: the write is then fenced on the
        # generation it replaces, and the outcome can name the state it left.
        def plan(seen: Record | None, corrupt: dict[str, Any] | None, _: int) -> _Step:
            planned = rules.apply_force(seen, policy, now_ms, target)
            after = planned.record
            assert after is not None
            # window=False: an operator's tool may not know the fleet's window.
            write = Write(now_ms, policy, target, window=False)
            if action is not None:
                write.set(schema.LAST_ACTION, action.encode())
            if seen is None:
                write_fresh(write, after, corrupt)
            else:
                # The census ring stays: the fleet's size does not change with its state.
                write_record(write, after).set(schema.GEN, after.gen)
                write.remove_leases(range(MAX_PROBE_SLOTS))
                write.require(write.usable()).require(write.is_(schema.GEN, seen.gen))
            return _Step(write, _changed(planned.transition))

        seen, corrupt = parse_or_corrupt(self._get(name), now_ms)
        gave_up = _refuse(f"could not force breaker {name!r} to {target.value}")
        return self._fenced_write(
            name, now_ms, seen, plan, attempts=4, gave_up=gave_up, corrupt=corrupt
        )

    # -- operators -------------------------------------------------------------------------

    def list_records(self, now_ms: int, *, page_size: int | None = None) -> Iterator[Listing]:
        """Every breaker in the table: a paginated, strongly consistent Scan.

        A Scan reads the whole table (every breaker is one small item), so this is for
        operators, never for the breaker's own path. ``page_size`` caps the items per Scan
        call (default: DynamoDB's 1 MB pages).
        """
        start: dict[str, Any] | None = None
        while True:
            request: dict[str, Any] = {"ConsistentRead": True}
            if page_size is not None:
                request["Limit"] = page_size
            if start is not None:
                request["ExclusiveStartKey"] = start
            page = self._wire.scan(request)
            for item in page.get("Items", []):
                name = scalar(item, KEY_ATTRIBUTE, "S")
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
        self,
        name: str,
        policy: Policy,
        now_ms: int,
        tuned: str,
        action: Action | None,
        *,
        expected: str | None = None,
    ) -> Record | None:
        def plan(seen: Record | None, corrupt: dict[str, Any] | None, _: int) -> _Step | Outcome:
            if expected is not None and (seen.tuned if seen is not None else "") != expected:
                return Outcome(seen)  # the settings changed since the caller read them
            state = seen.state if seen is not None else State.CLOSED
            write = Write(now_ms, policy, state, window=False)
            if tuned:
                write.set(schema.TUNED, tuned)
            else:
                write.removes.append(write.name(schema.TUNED))
            if action is not None:
                write.set(schema.LAST_ACTION, action.encode())
            if seen is None:
                # No live record: a fresh closed one carries the settings.
                write_fresh(write, Record(), corrupt)
            else:
                # Fenced on the generation: the TTL written depends on the state it found.
                write.require(write.usable()).require(write.is_(schema.GEN, seen.gen))
                if expected is not None:
                    # And on the settings the caller merged into: a tune in between re-plans.
                    held = write.name(schema.TUNED)
                    write.require(
                        write.is_(schema.TUNED, expected)
                        if expected
                        else f"attribute_not_exists({held}) OR {write.is_(schema.TUNED, '')}"
                    )
            return _Step(write, _changed(None))

        seen, corrupt = parse_or_corrupt(self._get(name), now_ms)
        gave_up = _refuse(f"could not tune breaker {name!r}")
        outcome = self._fenced_write(
            name, now_ms, seen, plan, attempts=4, gave_up=gave_up, corrupt=corrupt
        )
        return outcome.record
