"""A call that hangs is reported slow while it still runs, by a process that is then killed.

Lambda ends a hung invocation by its timeout, which freezes or kills the container: a count
kept until the call returns would never reach the fleet. Here a real child process runs the
breaker against a real store (moto's server, redis-server), starts a call that never returns,
and is SIGKILLed once the store shows the slow call. The watcher thread, on the real clock,
is what reports it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest

from devtools import servers
from fleetbreaker import DynamoDBStore, RedisStore, State
from fleetbreaker.rules import sliding_window
from tests.support import make_policy

pytestmark = pytest.mark.realtime  # store deadlines and hung calls, on the wall clock

CHILD = textwrap.dedent(
    """
    import sys, threading
    from devtools.servers import patient_store_clients
    from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore, RedisStore
    # What is timed here is the hung call, on the watcher's clock: the store answers as a
    # healthy one does, so its clients wait as long as a busy machine may need.
    patient_store_clients()
    backend, target, name, minimum = sys.argv[1:5]
    if backend == "redis":
        store = RedisStore(url=target)
    else:
        endpoint, table = target.split("|")
        store = DynamoDBStore(table, endpoint_url=endpoint)
    config = BreakerConfig(
        slow_call_duration=0.3,
        slow_call_rate_threshold=1.0,
        minimum_calls=int(minimum),
        store_deadline_seconds=10,
    )
    breaker = CircuitBreaker(name, store=store, config=config, container_id="doomed")
    breaker.state  # warm: the first store contact is a read

    def hang():
        print("started", flush=True)
        threading.Event().wait()  # never returns: only SIGKILL ends this process

    breaker.call(hang)
    """
)
# How long the parent waits for the store to show the slow call (real time: a real process).
WAIT_S = 15.0


@pytest.fixture(params=["moto_server", "redis"])
def backend(request: pytest.FixtureRequest) -> tuple[str, str, Any]:
    if request.param == "redis":
        url = request.getfixturevalue("redis_server")
        return "redis", url, RedisStore(url=url, socket_timeout=5.0)
    endpoint = request.getfixturevalue("moto_server")
    table = servers.make_table(endpoint)
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    return "dynamodb", f"{endpoint}|{table}", store


def run_doomed_container(backend: tuple[str, str, Any], minimum_calls: int, done: Any) -> Any:
    """Start the child, wait until ``done(record)`` holds for the stored record, SIGKILL it."""
    kind, target, store = backend
    name = f"hung-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, kind, target, name, str(minimum_calls)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started", child.stderr
        deadline = time.monotonic() + WAIT_S
        record = None
        while time.monotonic() < deadline:
            record = store.load(name, int(time.time() * 1000))
            if record is not None and done(record):
                break
            time.sleep(0.05)  # waiting on a real process, not moving a clock
        else:
            raise AssertionError(f"the store never showed the hung call: {record!r}")
        assert child.poll() is None  # still hung when its count reached the store
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    return store.load(name, int(time.time() * 1000))


def test_a_hung_call_in_a_killed_container_still_counts_slow(backend) -> None:
    policy = make_policy(slow_call_duration=0.3, minimum_calls=100)

    def counted(record: Any) -> bool:
        return sliding_window(policy).counts(record, int(time.time() * 1000)).slow == 1

    record = run_doomed_container(backend, minimum_calls=100, done=counted)

    counts = sliding_window(policy).counts(record, int(time.time() * 1000))
    assert (counts.calls, counts.slow, counts.failures) == (1, 1, 0)
    assert record.state is State.CLOSED


def test_a_hung_call_that_reaches_the_slow_rate_opens_the_fleet(backend) -> None:
    record = run_doomed_container(backend, minimum_calls=1, done=lambda r: r.state is State.OPEN)

    assert (record.state, record.gen) == (State.OPEN, 1)
