"""Lambda Managed Instances, as processes: the processes of one execution environment share
their reads of the record (fleetbreaker.shared_refresh), against real shared stores.

Each process builds its breaker as a function's init does (no ``shared_refresh_dir``): Lambda's
``AWS_LAMBDA_MAX_CONCURRENCY`` says it runs beside others, and the temporary directory is its
environment's. The test moves one shared clock and has the processes call in turn, so nothing
sleeps and every run is the same.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from devtools import servers
from tests.concurrency.fleet import CTX, StoreSpec
from tests.support import T0

pytestmark = pytest.mark.slow

PROCESSES = 3  # per environment
STEP_MS = 250
STEPS = 12  # 3 s: reads due at 0, 1, 2 and 3 s
CONFIG = {"failure_threshold": 3, "window_seconds": 60, "cache_ttl": 1.0}


def _process(
    spec: StoreSpec,
    name: str,
    directory: str,
    concurrency: int,
    clock: Any,
    commands: Any,
    answers: Any,
) -> None:
    """One Python process of an execution environment: its own init, its own breaker."""
    import random

    from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError
    from fleetbreaker.shared_refresh import CONCURRENCY_ENV

    os.environ[CONCURRENCY_ENV] = str(concurrency)
    tempfile.tempdir = directory  # the environment's /tmp
    store = spec.build()
    breaker = CircuitBreaker(
        name,
        store=store,
        config=BreakerConfig(**CONFIG),
        clock=lambda: int(clock.value),
        rng=random.Random(11),
    )

    def failing() -> None:
        raise ConnectionError("dependency down")

    while True:
        command = commands.get(timeout=120)
        if command == "stop":
            return
        if command == "fail":
            with contextlib.suppress(ConnectionError, CircuitOpenError):
                breaker.call(failing)
        answers.put((breaker.state.value, store.stats.reads))


class Environments:
    """Processes grouped in execution environments, called one at a time on one clock."""

    def __init__(self, spec: StoreSpec, root: Path, sizes: dict[str, int]) -> None:
        self.name = f"lmi-{uuid.uuid4().hex[:8]}"
        self.clock = CTX.Value("q", T0)
        self.members: list[tuple[str, Any, Any, Any]] = []
        for environment, concurrency in sizes.items():
            directory = root / environment
            directory.mkdir()
            for _ in range(PROCESSES):
                commands, answers = CTX.Queue(), CTX.Queue()
                args = (spec, self.name, str(directory), concurrency, self.clock)
                worker = CTX.Process(target=_process, args=(*args, commands, answers))
                worker.start()
                self.members.append((environment, worker, commands, answers))

    def step(self, command: str = "call") -> list[tuple[str, str, int]]:
        """Each process in turn runs ``command``: (environment, state, store reads so far)."""
        seen = []
        for environment, _, commands, answers in self.members:
            commands.put(command)
            state, reads = answers.get(timeout=120)
            seen.append((environment, state, reads))
        return seen

    def advance(self, ms: int) -> None:
        with self.clock.get_lock():
            self.clock.value += ms

    def stop(self) -> None:
        for _, _, commands, _ in self.members:
            commands.put("stop")
        for _, worker, _, _ in self.members:
            worker.join(60)
            if worker.is_alive():
                worker.kill()


@pytest.fixture(params=["moto_server", "redis"])
def spec(request: pytest.FixtureRequest) -> StoreSpec:
    if request.param == "moto_server":
        endpoint = request.getfixturevalue("moto_server")
        return StoreSpec("dynamodb", endpoint, servers.make_table(endpoint))
    return StoreSpec("redis", request.getfixturevalue("redis_server"))


def _reads(seen: list[tuple[str, str, int]], environment: str) -> int:
    return sum(reads for where, _, reads in seen if where == environment)


def test_the_processes_of_one_environment_read_once_per_cache_ttl(
    spec: StoreSpec, tmp_path: Path
) -> None:
    # GIVEN two environments of 3 processes: one on Managed Instances (concurrency 3), one
    # whose processes do not know of each other (concurrency 1: shared reads off)
    fleet = Environments(spec, tmp_path, {"managed": PROCESSES, "alone": 1})
    try:
        # WHEN every process calls every 250 ms for 3 s (cache_ttl 1 s)
        seen = fleet.step()
        for _ in range(STEPS):
            fleet.advance(STEP_MS)
            seen = fleet.step()
    finally:
        fleet.stop()
    # THEN the managed environment read the store once a second for its 3 processes, as one
    # process does; the other environment's processes read once a second each
    assert _reads(seen, "managed") == 4
    assert _reads(seen, "alone") == 4 * PROCESSES


def test_a_trip_reaches_every_process_within_cache_ttl(spec: StoreSpec, tmp_path: Path) -> None:
    # GIVEN two Managed Instances environments whose processes all see the breaker closed
    fleet = Environments(spec, tmp_path, {"first": PROCESSES, "second": PROCESSES})
    try:
        fleet.step()
        fleet.advance(STEP_MS)
        # WHEN the processes of the first environment fail 3 calls (the threshold)
        for _, _, commands, answers in fleet.members[:PROCESSES]:
            commands.put("fail")
            answers.get(timeout=120)
        # THEN within cache_ttl every process of both environments rejects, the second
        # environment's copies of the closed record included
        fleet.advance(1000)
        states = {state for _, state, _ in fleet.step()}
    finally:
        fleet.stop()
    assert states == {"open"}


def test_a_forged_copy_and_a_planted_link_hide_no_trip(spec: StoreSpec, tmp_path: Path) -> None:
    from fleetbreaker.record import Record
    from fleetbreaker.shared_refresh import Shared, SharedCopy, copy_key
    from fleetbreaker.view import MAX_REFRESH_STRETCH

    # GIVEN two Managed Instances environments; in the second, a copy of the closed record
    # that claims a day of freshness, and a link at the lock's path to a file that does not
    # exist (both planted before its processes first look)
    fleet = Environments(spec, tmp_path, {"first": PROCESSES, "second": PROCESSES})
    victim = tmp_path / "victim"
    try:
        copy = SharedCopy(tmp_path / "second", copy_key(spec.build(), fleet.name))
        day_ms = 86_400_000
        copy.put(Shared(Record(expires_at=(T0 + day_ms) // 1000), T0, T0 + day_ms))
        os.symlink(victim, copy.lock_path)
        fleet.step()
        fleet.advance(STEP_MS)
        # WHEN the processes of the first environment fail 3 calls (the threshold), and the
        # longest a process keeps its own view passes
        for _, _, commands, answers in fleet.members[:PROCESSES]:
            commands.put("fail")
            answers.get(timeout=120)
        fleet.advance(round(MAX_REFRESH_STRETCH * CONFIG["cache_ttl"] * 1000) - STEP_MS)
        states = {state for _, state, _ in fleet.step()}
    finally:
        fleet.stop()
    # THEN every process rejects, and nothing was created where the link points
    assert states == {"open"}
    assert not victim.exists()
