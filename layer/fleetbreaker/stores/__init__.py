"""Shared stores: each keeps one record per breaker and applies the rules atomically."""

from fleetbreaker.stores.base import Store, StoreStats
from fleetbreaker.stores.memory import MemoryStore

__all__ = ["MemoryStore", "Store", "StoreStats"]
