"""The snapshot hooks as a process sees them: registered by the first breaker, never by the
import, absent from a call's path, and what they do to every live breaker of the process.

Each test runs in a fresh interpreter (the hooks are once per process, and act on every
breaker of it): the layer on its path, ``snapshot_restore_py`` importable from this venv as
it is in Lambda's Python runtimes, or hidden to stand for a runtime without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

LAYER = Path(__file__).resolve().parents[2] / "layer"

# Makes `import snapshot_restore_py` raise ImportError, as outside Lambda's runtimes.
WITHOUT_RUNTIME_HOOKS = "import sys\nsys.modules['snapshot_restore_py'] = None\n"


def run(code: str, *, runtime_hooks: bool = True) -> Any:
    """Run ``code`` in a fresh interpreter (where ``snapshot_restore_py`` cannot be imported
    unless ``runtime_hooks``); the JSON it prints last."""
    source = textwrap.dedent(code)
    if not runtime_hooks:
        source = WITHOUT_RUNTIME_HOOKS + source
    done = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(LAYER), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


# -- registration ----------------------------------------------------------------------------


def test_import_fleetbreaker_registers_nothing_and_loads_no_hook() -> None:
    # GIVEN a fresh interpreter WHEN the package is imported
    loaded = run(
        """
        import json, sys
        import fleetbreaker
        print(json.dumps(sorted(
            name for name in ("fleetbreaker.restore", "snapshot_restore_py") if name in sys.modules
        )))
        """
    )
    # THEN neither the hooks' module nor the runtime's registry is loaded
    assert loaded == []


def test_the_first_breaker_registers_both_hooks_once() -> None:
    # GIVEN a fresh interpreter WHEN three breakers are built
    registered = run(
        """
        import json
        import fleetbreaker
        from fleetbreaker import CircuitBreaker, MemoryStore
        for name in ("a", "b", "c"):
            CircuitBreaker(name, store=MemoryStore())
        import snapshot_restore_py as runtime
        named = lambda hooks: [f.__module__ + "." + f.__name__ for f, _, _ in hooks]
        print(json.dumps({
            "before": named(runtime.get_before_snapshot()),
            "after": named(runtime.get_after_restore()),
            "public": [fleetbreaker.before_snapshot is runtime.get_before_snapshot()[0][0],
                       fleetbreaker.after_restore is runtime.get_after_restore()[0][0]],
        }))
        """
    )
    # THEN each hook is registered once, and they are the package's public functions
    assert registered == {
        "before": ["fleetbreaker.restore.before_snapshot"],
        "after": ["fleetbreaker.restore.after_restore"],
        "public": [True, True],
    }


def test_without_the_runtimes_registry_a_breaker_works_and_registers_nothing() -> None:
    # GIVEN an interpreter where snapshot_restore_py cannot be imported
    answer = run(
        """
        import json
        from fleetbreaker import CircuitBreaker, MemoryStore
        from fleetbreaker.restore import register_runtime_hooks
        # WHEN a breaker is built and called
        breaker = CircuitBreaker("svc", store=MemoryStore())
        called = breaker.call(lambda: "ok")
        print(json.dumps({"call": called, "registers": register_runtime_hooks()}))
        """,
        runtime_hooks=False,
    )
    # THEN the call ran, and there was nowhere to register the hooks
    assert answer == {"call": "ok", "registers": False}


def test_a_healthy_call_runs_the_same_code_with_the_hooks_registered_or_not() -> None:
    # GIVEN the same warm breaker (count policy, then rate policy) in two interpreters, one
    # with the runtime's hook registry and one without
    probe = """
        import json, sys
        from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore
        traces = []
        for config in (BreakerConfig(), BreakerConfig(failure_rate_threshold=0.5)):
            breaker = CircuitBreaker("svc", store=MemoryStore(), config=config, clock=lambda: 1)
            breaker.call(len, "warm")  # the record read and cached
            called = []

            def profile(frame, event, arg):
                if event == "call":
                    called.append(f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}")
                elif event == "c_call":
                    called.append(f"builtin.{arg.__name__}")

            sys.setprofile(profile)
            breaker.call(len, "healthy")
            sys.setprofile(None)
            traces.append(called)
        registered = sys.modules.get("snapshot_restore_py") is not None
        print(json.dumps({"traces": traces, "registered": registered}))
        """
    # WHEN each makes one healthy call, traced
    with_hooks = run(probe)
    without_hooks = run(probe, runtime_hooks=False)
    # THEN the calls crossed the same functions, none of them the hooks'
    assert with_hooks["registered"]
    assert not without_hooks["registered"]
    assert with_hooks["traces"] == without_hooks["traces"]
    crossed = {name for trace in with_hooks["traces"] for name in trace}
    assert "fleetbreaker.sync_driver.run" in crossed
    assert not {name for name in crossed if "restore" in name or "snapshot" in name}


# -- what the hooks do -----------------------------------------------------------------------


def test_after_restore_restarts_every_live_breaker_and_the_processs_id() -> None:
    # GIVEN two live breakers and one dropped, in a process with an id
    answer = run(
        """
        import gc, json
        import fleetbreaker
        from fleetbreaker import CircuitBreaker, MemoryStore
        from fleetbreaker.naming import process_container_id
        from fleetbreaker.restore import live_breakers
        kept = [CircuitBreaker(name, store=MemoryStore()) for name in ("a", "b")]
        CircuitBreaker("dropped", store=MemoryStore())
        gc.collect()
        before = process_container_id()
        # WHEN the process is restored
        fleetbreaker.after_restore()
        later = CircuitBreaker("later", store=MemoryStore())
        print(json.dumps({
            "before": before,
            "process": process_container_id(),
            "kept": [breaker.container_id for breaker in kept],
            "later": later.container_id,
            "live": sorted(breaker.name for breaker in live_breakers()),
        }))
        """
    )
    # THEN the process has a new id, which the live breakers and any built later count under
    assert answer["process"] != answer["before"]
    assert answer["kept"] == [answer["process"]] * 2
    assert answer["later"] == answer["process"]
    # and the dropped breaker was not kept alive by the registry
    assert answer["live"] == ["a", "b", "later"]


def test_after_restore_goes_on_past_a_breaker_that_cannot_restart() -> None:
    # GIVEN two breakers, the first on a store whose connections cannot be dropped
    answer = run(
        """
        import json, logging
        import fleetbreaker
        from fleetbreaker import CircuitBreaker, MemoryStore
        from fleetbreaker.naming import process_container_id
        class Stuck(MemoryStore):
            def drop_connections(self):
                raise OSError("socket in a bad state")
        logged = []
        class Keep(logging.Handler):
            def emit(self, record):
                logged.append(record.getMessage())
        logging.getLogger("fleetbreaker").addHandler(Keep())
        first = CircuitBreaker("first", store=Stuck())
        second = CircuitBreaker("second", store=MemoryStore())
        # WHEN the process is restored (as the runtime calls it: an exception fails the restore)
        fleetbreaker.after_restore()
        print(json.dumps({
            "second": second.container_id == process_container_id(),
            "logged": [line for line in logged if "could not restart" in line],
        }))
        """
    )
    # THEN it did not raise, the second breaker restarted, and the failure was logged
    assert answer == {"second": True, "logged": ["fleetbreaker: breaker 'first' could not restart"]}


def test_before_snapshot_sends_every_breakers_pending_calls_and_metrics() -> None:
    # GIVEN two rate-policy breakers with calls tallied, and a metrics listener with events
    answer = run(
        """
        import contextlib, io, json
        import fleetbreaker
        from fleetbreaker import BreakerConfig, CircuitBreaker, LoggingListener, MemoryStore
        from fleetbreaker.metrics import MetricsListener
        from fleetbreaker.policy import Policy
        from fleetbreaker.rules import sliding_window
        config = BreakerConfig(failure_rate_threshold=0.5, minimum_calls=1000)
        store = MemoryStore()
        metrics = MetricsListener(namespace="Snapshot")
        breakers = [
            CircuitBreaker(name, store=store, config=config, clock=lambda: 1_000,
                           listeners=[LoggingListener(), metrics])
            for name in ("a", "b")
        ]
        for breaker in breakers:
            for _ in range(3):
                breaker.call(len, "x")
        metrics.on_rejected("a", None, 0.0)
        # WHEN the snapshot is about to be taken
        written = io.StringIO()
        with contextlib.redirect_stdout(written):
            fleetbreaker.before_snapshot()
        window = sliding_window(Policy.from_config(config))
        print(json.dumps({
            "calls": [window.counts(store.load(n, 1_000), 1_000).calls for n in "ab"],
            "metrics_left": metrics.pending_documents,
            "emf": written.getvalue().count('"_aws"'),
        }))
        """
    )
    # THEN each breaker's calls are in its window, and the metrics were written
    assert answer["calls"] == [3, 3]
    assert answer["metrics_left"] == 0
    assert answer["emf"] >= 1


def test_before_snapshot_never_raises_when_a_store_is_down() -> None:
    # GIVEN a rate-policy breaker with calls tallied, whose store then fails every request
    answer = run(
        """
        import json
        import fleetbreaker
        from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore
        class Down(MemoryStore):
            broken = False
            def report(self, *args):
                if self.broken:
                    raise OSError("store down")
                return super().report(*args)
        store = Down()
        config = BreakerConfig(failure_rate_threshold=0.5, minimum_calls=1000)
        breaker = CircuitBreaker("svc", store=store, config=config, clock=lambda: 1_000)
        breaker.call(len, "x")
        store.broken = True
        # WHEN the snapshot is about to be taken
        fleetbreaker.before_snapshot()
        print(json.dumps({"degraded": breaker.degraded}))
        """
    )
    # THEN the hook returned; the breaker degraded as on any store failure
    assert answer == {"degraded": True}
