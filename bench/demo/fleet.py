"""The container processes: started once, reused by both runs, always stopped.

Every process is spawned with SIGINT blocked (a signal mask survives exec), so a Ctrl-C in the
terminal, which reaches the whole foreground process group, cannot interrupt one half-way
through its start; the demo process takes the Ctrl-C and stops them all here, by PID: a stop
request, then SIGTERM, then SIGKILL. Each container also asks the kernel to kill it if the demo
process dies (see container.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.demo.container import Call, ContainerReport, RunSpec, container_main

CTX = multiprocessing.get_context("spawn")
START_TIMEOUT = 120.0  # 16 interpreters importing boto3 and Powertools on 2 busy cores


class FleetError(RuntimeError):
    """A container failed to start, crashed, or did not answer in time."""


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """Children started inside never see SIGINT; a Ctrl-C meanwhile reaches the demo after.

    A blocked signal stays blocked across fork and exec, so the children keep it blocked; the
    demo process gets a pending one delivered when the block ends.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class Fleet:
    """``count`` container processes. Use as a context manager."""

    def __init__(self, count: int, env: dict[str, str], log_path: str) -> None:
        self.count = count
        self.log_path = log_path
        self._env = env
        self._results: Any = CTX.Queue()
        self._commands: list[Any] = [CTX.Queue() for _ in range(count)]
        self._go: Any = CTX.Event()
        self._stop: Any = CTX.Event()
        self._t0: Any = CTX.Value("d", 0.0)
        self.processes: list[Any] = []

    def start(self) -> Fleet:
        with sigint_blocked():
            for number in range(self.count):
                proc = CTX.Process(
                    target=container_main,
                    name=f"container-{number}",
                    args=(
                        number,
                        os.getpid(),
                        self._env,
                        self.log_path,
                        self._commands[number],
                        self._results,
                        self._go,
                        self._stop,
                        self._t0,
                    ),
                    daemon=True,
                )
                proc.start()
                self.processes.append(proc)
        self._gather("started", START_TIMEOUT)
        return self

    def prepare(self, spec: RunSpec) -> None:
        """Every container builds its handler for ``spec`` and waits for :meth:`go`."""
        self._go.clear()
        self._stop.clear()
        for commands in self._commands:
            commands.put(spec)
        self._gather("ready", START_TIMEOUT)

    def go(self, start: float) -> None:
        """Containers take their first payments at ``start`` (epoch seconds) and on."""
        self._t0.value = start
        self._go.set()

    def drain(self, on_calls: Callable[[list[Call]], None], seconds: float) -> None:
        """Pass the calls that arrive within ``seconds`` to ``on_calls``."""
        self._drain(on_calls, until=time.time() + seconds)

    def finish(self, on_calls: Callable[[list[Call]], None]) -> list[ContainerReport]:
        """Stop the run; every container's last calls, then its report."""
        self._stop.set()
        reports = self._gather("done", 30.0, on_calls)
        return sorted(reports, key=lambda report: report.container)

    def _drain(self, on_calls: Callable[[list[Call]], None], until: float) -> None:
        while (left := until - time.time()) > 0:
            try:
                kind, number, payload = self._results.get(timeout=left)
            except queue.Empty:
                break
            self._handle(kind, number, payload, on_calls)
        self._check_alive()

    def _gather(
        self, wanted: str, timeout: float, on_calls: Callable[[list[Call]], None] | None = None
    ) -> list[Any]:
        """Wait until every container has sent ``wanted``; returns their payloads."""
        got: dict[int, Any] = {}
        deadline = time.time() + timeout
        while len(got) < self.count:
            if time.time() > deadline:
                missing = sorted(set(range(self.count)) - set(got))
                raise FleetError(f"containers {missing} sent no {wanted!r} in {timeout:.0f} s")
            try:
                kind, number, payload = self._results.get(timeout=0.2)
            except queue.Empty:
                self._check_alive()
                continue
            if kind == wanted:
                got[number] = payload
            else:
                self._handle(kind, number, payload, on_calls)
        return list(got.values())

    def _handle(
        self,
        kind: str,
        number: int,
        payload: Any,
        on_calls: Callable[[list[Call]], None] | None,
    ) -> None:
        if kind == "calls" and on_calls is not None:
            on_calls(payload)
        elif kind == "error":
            raise FleetError(f"container {number} failed:\n{payload}")

    def _check_alive(self) -> None:
        for number, proc in enumerate(self.processes):
            if proc.exitcode is not None:
                raise FleetError(
                    f"container {number} exited with code {proc.exitcode}; "
                    f"its log is in {self.log_path}"
                )

    def stop(self) -> None:
        """Stop every container: ask, then SIGTERM, then SIGKILL; reap them all."""
        self._stop.set()
        self._go.set()  # a container waiting for the start sees the stop at once
        for commands in self._commands:
            with contextlib.suppress(Exception):
                commands.put(None)
        deadline = time.time() + 2.0
        for proc in self.processes:
            proc.join(max(0.0, deadline - time.time()))
        for proc in self.processes:
            if proc.exitcode is None:
                proc.terminate()
        for proc in self.processes:
            proc.join(2.0)
            if proc.exitcode is None:
                proc.kill()
                proc.join()
        # The queues' feeder threads must not wait for readers that are gone.
        for channel in [self._results, *self._commands]:
            channel.cancel_join_thread()
            channel.close()
        self.processes.clear()

    def __enter__(self) -> Fleet:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
