"""Snapshots of a live process: every breaker becomes a new container after a restore.

Lambda SnapStart runs a function's init once, when a version is published, and resumes every
new execution environment from a snapshot of that process: the same memory, the same pid.
A breaker built at init (at module level, as the README says) would then be one container
in every environment: the same container id (the quorum of ``min_containers`` sees one), the
same random source (the same census draws and jitter, in the same instant), the same
cached view and pending counts, and connections, a token and worker threads that belong to
another time.

So this module keeps a registry of the process's live breakers (weak references: it keeps
none alive) and two hooks:

- :func:`before_snapshot`: each breaker sends what it has pending (the rate policy's tally:
  counted once, by the process that counted it), and the metrics gathered at init are
  written once;
- :func:`after_restore`: the process gets a new container id, its slow-call watcher
  restarted and an empty metrics buffer, and every breaker restarts
  (:meth:`~fleetbreaker.CircuitBreaker.restart`): a new id and random source, no cached view,
  every schedule drawn afresh, a new store-worker pool and its store's connections dropped.

When ``snapshot_restore_py`` is importable (Lambda's Python runtimes ship it) the first
breaker built registers both hooks with it, once per process; nothing is registered or
imported by ``import fleetbreaker``, and a call through a breaker never touches this module.
Other snapshot mechanisms call the two functions themselves (``fleetbreaker.after_restore()``).
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from typing import TYPE_CHECKING

from fleetbreaker import naming

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    class Restartable(Protocol):
        """What the registry asks of a breaker (:class:`~fleetbreaker.CircuitBreaker`)."""

        name: str

        def flush(self, now: int | None = None) -> None: ...

        def restart(self, now: int | None = None) -> None: ...


log = logging.getLogger("fleetbreaker")

_live: weakref.WeakSet[Restartable] = weakref.WeakSet()
_lock = threading.Lock()
_hooks_tried = False


def track(breaker: Restartable) -> None:
    """Register a breaker just built; the first one registers the runtime's hooks."""
    global _hooks_tried
    with _lock:
        _live.add(breaker)
        if _hooks_tried:
            return
        _hooks_tried = True
    register_runtime_hooks()


def register_runtime_hooks() -> bool:
    """Register :func:`before_snapshot` and :func:`after_restore` with the Lambda runtime's
    ``snapshot_restore_py``; False when it is not importable (not on Lambda's Python)."""
    try:
        from snapshot_restore_py import register_after_restore, register_before_snapshot
    except ImportError:
        return False
    register_before_snapshot(before_snapshot)
    register_after_restore(after_restore)
    return True


def live_breakers() -> list[Restartable]:
    """The process's breakers still in use (a dropped breaker leaves the registry)."""
    with _lock:
        return list(_live)


def before_snapshot() -> None:
    """Before the process is snapshotted: send what every breaker has pending, write the
    metrics gathered so far.

    Lambda SnapStart calls it (through ``snapshot_restore_py``) when init has finished. With
    another snapshot mechanism, call it just before the snapshot is taken. It never raises
    (the runtime fails a snapshot whose hook raises): a store that cannot take a report
    leaves that breaker degraded, as any store failure does, logged by its listeners, and
    those counts stay out of the fleet's window.
    """
    for breaker in live_breakers():
        try:
            breaker.flush()
        except Exception:
            log.exception("fleetbreaker: breaker %r could not send its counts", breaker.name)
    if sys.modules.get("fleetbreaker.metrics") is not None:
        from fleetbreaker.metrics import flush_every_listener

        try:
            flush_every_listener()
        except Exception:
            log.exception("fleetbreaker: could not write the metrics gathered at init")


def after_restore() -> None:
    """After the process was restored from a snapshot: make it a new container.

    A new container id for the process; the slow-call watcher started again; the metrics
    buffer emptied (what it held was the snapshot's, written before it, if at all); then
    every live breaker restarts (:meth:`~fleetbreaker.CircuitBreaker.restart`), its store
    wrapper with a new store-worker pool for the process (the snapshot's threads may be
    gone, or hold calls of another time). A breaker built after the restore needs nothing.

    Lambda SnapStart calls it (through ``snapshot_restore_py``) before the first invocation
    of each restored execution environment. With another snapshot mechanism (a snapshot of a
    Firecracker microVM or of a CRIU checkpoint of your own), call it first thing after a
    restore, before any call goes through a breaker. It never raises: what fails is logged,
    and the rest still restarts.

    Example
    -------
    A process restored by a snapshot mechanism of your own (not run here: it would restart
    every breaker of this process)::

        import fleetbreaker

        def on_restored():  # your mechanism's hook, before the first request
            fleetbreaker.after_restore()
    """
    steps: list[tuple[str, Callable[[], object]]] = [
        ("container id", naming.renew_process_container_id)
    ]
    if sys.modules.get("fleetbreaker.watcher") is not None:
        from fleetbreaker.watcher import restart_watch

        steps.append(("slow-call watcher", restart_watch))
    if sys.modules.get("fleetbreaker.metrics") is not None:
        from fleetbreaker.metrics import restart_every_listener

        steps.append(("metrics buffer", restart_every_listener))
    for what, step in steps:
        try:
            step()
        except Exception:  # the runtime fails a restore whose hook raises: log and go on
            log.exception("fleetbreaker: could not restart the process's %s", what)
    breakers = live_breakers()
    for breaker in breakers:
        try:
            breaker.restart()
        except Exception:
            log.exception("fleetbreaker: breaker %r could not restart", breaker.name)
    log.info(
        "fleetbreaker: restored from a snapshot: %d breaker(s) restarted as container %s",
        len(breakers),
        naming.process_container_id(),
        extra={"breaker_event": "restored"},
    )
