"""What the function under SnapStart does, scenario by scenario (run by tests.restore.runtime).

Each scenario is a function's life in four parts: ``init()`` (the breaker built at module
level, a call or two), ``snapshotted()`` (the world moves on while the snapshot waits),
``wake()`` (the clock at the restore: ``restore_after_s`` later), ``invoke(index)`` (what
each restored environment does, and what it tells the test), and ``snapshot()`` (the
snapshot's own continuation). The job names the scenario, the store and the number of
environments; the test reads the answers and the store.

Time is one injected wall clock (epoch ms), for the breaker and for the IAM token alike.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from fleetbreaker import (
    BreakerConfig,
    BreakerListener,
    CircuitBreaker,
    CircuitOpenError,
    LoggingListener,
)
from fleetbreaker.naming import container_key
from fleetbreaker.policy import Policy
from fleetbreaker.rules import sliding_window

T_INIT_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DRAWS = 5
# Not what these tests are about: a store answer slowed by a busy machine must neither
# degrade a breaker nor be retried on a new connection (the defaults: a 1 s deadline, 0.2 s
# connect and 0.3 s read timeouts).
DEADLINE = {"store_deadline_seconds": 10.0}
TIMEOUTS = {"connect_timeout": 5.0, "read_timeout": 5.0}


class WallClock:
    """Epoch milliseconds, moved by hand (one per process: a fork copies it)."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def seconds(self) -> float:
        return self() / 1000

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += round(seconds * 1000)


class Failure(Exception):
    """The dependency's failure in these scenarios."""


def succeed() -> str:
    return "ok"


def fail() -> str:
    raise Failure("the dependency failed")


class Scenario:
    """The default life: a breaker at init, one call per environment."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.name: str = job["name"]
        self.environments: int = job["environments"]
        self.clock = WallClock(T_INIT_MS)
        self.store: Any = None
        self.auth: Any = None
        self.breaker: CircuitBreaker | None = None

    def config(self) -> BreakerConfig:
        return BreakerConfig(**DEADLINE)

    def listeners(self) -> list[Any]:
        return [LoggingListener()]

    def build(self) -> CircuitBreaker:
        self.store = self.make_store(self.job["store"])
        breaker = CircuitBreaker(
            self.name,
            store=self.store,
            config=self.config(),
            clock=self.clock,
            listeners=self.listeners(),
        )
        self.breaker = breaker
        return breaker

    def make_store(self, spec: dict[str, Any]) -> Any:
        kind = spec["kind"]
        if kind == "memory":
            from tests.restore.served import ServedMemoryStore

            return ServedMemoryStore(tuple(spec["address"]), bytes.fromhex(spec["authkey"]))
        if kind == "dynamodb":
            from botocore.config import Config

            from fleetbreaker import DynamoDBStore

            return DynamoDBStore(
                table_name=spec["table"],
                endpoint_url=spec["endpoint_url"],
                boto_config=Config(**TIMEOUTS),
            )
        if kind == "redis":
            from botocore.credentials import Credentials

            from fleetbreaker import RedisStore
            from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth

            iam = spec["iam"]
            self.auth = ElastiCacheIAMAuth(
                iam["user"],
                iam["cache"],
                iam["region"],
                credentials=Credentials(*iam["credentials"]),
                clock=self.clock.seconds,
            )
            return RedisStore(
                url=spec["url"],
                ssl_ca_certs=spec["ca"],
                credential_provider=self.auth,
                use_server_time=False,
                socket_timeout=TIMEOUTS["read_timeout"],
                socket_connect_timeout=TIMEOUTS["connect_timeout"],
            )
        raise ValueError(f"no such store kind: {kind!r}")

    # -- the life --------------------------------------------------------------------------

    def init(self) -> dict[str, Any]:
        breaker = self.build()
        breaker.call(succeed)
        return self.facts()

    def snapshotted(self) -> None:
        spec = self.job["store"]
        if spec["kind"] == "redis" and self.auth is not None:
            # ElastiCache accepts a token for 15 minutes; this server stands in by refusing
            # the one signed at init from now on (the restore comes with a new wall clock).
            import redis

            admin = redis.Redis.from_url(
                spec["admin_url"],
                ssl_ca_certs=spec["ca"],
                username=spec["admin"][0],
                password=spec["admin"][1],
            )
            try:
                admin.execute_command("ACL", "SETUSER", self.auth.user_id, f"<{self.auth.token()}")
            finally:
                admin.close()

    def wake(self) -> None:
        self.clock.advance(self.job.get("restore_after_s", 10.0))

    def invoke(self, index: int) -> dict[str, Any]:
        breaker = self.the_breaker()
        draws = [breaker.rng.random() for _ in range(DRAWS)]
        breaker.call(succeed)
        return {**self.facts(), "draws": draws}

    def snapshot(self) -> dict[str, Any]:
        breaker = self.the_breaker()
        return {**self.facts(), "draws": [breaker.rng.random() for _ in range(DRAWS)]}

    # -- what the test is told -------------------------------------------------------------

    def the_breaker(self) -> CircuitBreaker:
        assert self.breaker is not None
        return self.breaker

    def facts(self) -> dict[str, Any]:
        breaker = self.the_breaker()
        facts: dict[str, Any] = {
            "container_id": breaker.container_id,
            "container_key": container_key(breaker.container_id),
            "degraded": breaker.degraded,
            "store_errors": breaker.stats.store_errors,
        }
        return facts


class Counts(Scenario):
    """The rate policy's tally: 7 calls at init (2 failing), 5 in each environment (1
    failing), then one more after the report interval, which sends the 5 (itself is left in
    the tally, for that environment's next report)."""

    INIT_CALLS, INIT_FAILURES = 7, 2
    CALLS, FAILURES = 5, 1

    def config(self) -> BreakerConfig:
        return BreakerConfig(
            failure_rate_threshold=0.5,
            minimum_calls=1000,
            report_interval=1.0,
            cache_ttl=1.0,
            **DEADLINE,
        )

    def init(self) -> dict[str, Any]:
        self.build()
        self.calls(self.INIT_CALLS, self.INIT_FAILURES)
        return self.facts()

    def invoke(self, index: int) -> dict[str, Any]:
        self.calls(self.CALLS, self.FAILURES)
        self.clock.advance(2.0)
        self.the_breaker().call(succeed)
        return self.facts()

    def calls(self, calls: int, failures: int) -> None:
        breaker = self.the_breaker()
        for number in range(calls):
            with contextlib.suppress(Failure):
                breaker.call(fail if number < failures else succeed)


class Quorum(Counts):
    """``min_containers`` = the number of environments: each fails 2 calls of its 3."""

    def config(self) -> BreakerConfig:
        return BreakerConfig(
            failure_rate_threshold=0.5,
            minimum_calls=2 * self.environments,
            min_containers=self.environments,
            report_interval=1.0,
            cache_ttl=1.0,
            **DEADLINE,
        )

    def init(self) -> dict[str, Any]:
        self.build().call(succeed)
        return self.facts()

    def invoke(self, index: int) -> dict[str, Any]:
        self.calls(2, 2)
        self.clock.advance(2.0)
        breaker = self.the_breaker()
        with contextlib.suppress(CircuitOpenError):  # the last one to report opened it
            breaker.call(succeed)
        return {**self.facts(), "state": breaker.state.value}


class SlowCalls(Scenario):
    """A call hung past ``slow_call_duration`` in a restored environment: the process's
    slow-call watcher reports it while it runs (within ``wait_s`` real seconds, or never)."""

    def config(self) -> BreakerConfig:
        return BreakerConfig(
            slow_call_duration=0.05, minimum_calls=1000, report_interval=2.0, **DEADLINE
        )

    def init(self) -> dict[str, Any]:
        self.build().call(succeed)  # a timed call: the watcher's thread starts at init
        return self.facts()

    def listeners(self) -> list[Any]:
        self.reported = threading.Event()
        return [LoggingListener(), ReportSeen(self.reported)]

    def invoke(self, index: int) -> dict[str, Any]:
        breaker = self.the_breaker()
        self.reported.clear()  # set in the snapshot by the init's report
        release = threading.Event()
        hung = threading.Thread(target=breaker.call, args=(release.wait, 30.0), daemon=True)
        hung.start()
        try:
            self.clock.advance(1.0)  # the call has now run 20 times its slow_call_duration
            # Real seconds: the watcher is a thread of its own, sweeping every 12.5 ms.
            self.reported.wait(self.job["wait_s"])
        finally:
            release.set()
            hung.join(timeout=30)
        policy = Policy.from_config(self.config())
        now = self.clock()
        slow = sliding_window(policy).counts(self.store.load(self.name, now), now).slow
        return {**self.facts(), "slow_calls_in_window": slow}


class ReportSeen(BreakerListener):
    """Sets ``event`` when a report reaches the store."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def on_store_call(self, name: str, operation: str, elapsed_ms: float, ok: bool) -> None:
        if operation == "report" and ok:
            self.event.set()


class Metrics(Scenario):
    """The breaker's EMF metrics (a MetricsListener): each store call adds a StoreLatency
    sample; each environment writes its buffer at the end of its invocation."""

    def listeners(self) -> list[Any]:
        from fleetbreaker.metrics import MetricsListener

        self.metrics = MetricsListener(namespace="Restore")
        return [LoggingListener(), self.metrics]

    def invoke(self, index: int) -> dict[str, Any]:
        self.the_breaker().call(succeed)
        self.metrics.flush()  # the end of the invocation (log_metrics)
        return self.facts()


SCENARIOS: dict[str, type[Scenario]] = {
    "identity": Scenario,
    "counts": Counts,
    "quorum": Quorum,
    "slow_calls": SlowCalls,
    "metrics": Metrics,
}


def scenario_for(job: dict[str, Any]) -> Scenario:
    return SCENARIOS[job["scenario"]](job)
