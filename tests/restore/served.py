"""One MemoryStore served by a process of its own, so that restored environments share it.

A restored snapshot's environments are processes of their own, and a MemoryStore lives in
one process. Here one MemoryStore lives in a server process (a multiprocessing manager) and
every process reaches it over a local socket through :class:`ServedMemoryStore`: each
operation is one round trip that MemoryStore itself applies under its one lock, as a
DynamoDB or Redis store has its server apply it. What this adds to MemoryStore is the wire
only: pickled arguments and answers, and one connection per calling thread (multiprocessing's
proxies open one per thread, so a restored child's worker threads, all new, connect anew).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from multiprocessing.managers import BaseManager
from typing import Any

from fleetbreaker.stores.base import StoreStats
from fleetbreaker.stores.memory import MemoryStore

Address = tuple[str, int]


class _Manager(BaseManager):
    pass


_STORE: MemoryStore | None = None


def _the_store() -> MemoryStore:
    global _STORE
    if _STORE is None:
        _STORE = MemoryStore()
    return _STORE


_Manager.register("store", callable=_the_store)


@contextlib.contextmanager
def memory_server() -> Iterator[tuple[Address, bytes]]:
    """A server process holding one MemoryStore: its address and key, while it runs."""
    authkey = secrets.token_bytes(16)
    manager = _Manager(address=("127.0.0.1", 0), authkey=authkey)
    manager.start()
    try:
        address = manager.address
        assert isinstance(address, tuple)
        yield (str(address[0]), int(address[1])), authkey
    finally:
        manager.shutdown()


class ServedMemoryStore:
    """The store contract on the served MemoryStore (what a breaker calls)."""

    def __init__(self, address: Address, authkey: bytes) -> None:
        manager = _Manager(address=tuple(address), authkey=authkey)
        manager.connect()
        self._store: Any = manager.store()  # type: ignore[attr-defined]
        self.stats = StoreStats()

    def load(self, name: str, now_ms: int) -> Any:
        return self._store.load(name, now_ms)

    def record_failure(self, *args: Any) -> Any:
        return self._store.record_failure(*args)

    def claim_probe(self, *args: Any) -> Any:
        return self._store.claim_probe(*args)

    def settle_probe(self, *args: Any) -> Any:
        return self._store.settle_probe(*args)

    def report(self, *args: Any) -> Any:
        return self._store.report(*args)

    def census(self, *args: Any) -> Any:
        return self._store.census(*args)

    def force_state(self, *args: Any) -> Any:
        return self._store.force_state(*args)
