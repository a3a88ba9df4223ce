"""Shared stores: each keeps one record per breaker and applies the rules atomically."""

from __future__ import annotations

import os
from collections.abc import Mapping

from fleetbreaker.errors import ConfigError
from fleetbreaker.stores.base import Store, StoreStats
from fleetbreaker.stores.fallback import FallbackStore
from fleetbreaker.stores.memory import MemoryStore

__all__ = ["FallbackStore", "MemoryStore", "Store", "StoreStats", "from_env"]

TABLE_ENV = "CIRCUIT_BREAKER_TABLE"
URL_ENV = "CIRCUIT_BREAKER_REDIS_URL"
REDIS_SCHEMES = ("redis://", "rediss://")


def from_env(environ: Mapping[str, str] | None = None, *, endpoint_url: str | None = None) -> Store:
    """The shared store the environment names: Redis if a URL is set, else DynamoDB.

    Parameters
    ----------
    environ:
        The variables to read (default ``os.environ``).
    endpoint_url:
        A local DynamoDB endpoint (moto, dynalite). Without it boto3 resolves the endpoint,
        which honours ``AWS_ENDPOINT_URL_DYNAMODB``.

    ``CIRCUIT_BREAKER_REDIS_URL`` (``redis://`` or ``rediss://``) wins over
    ``CIRCUIT_BREAKER_TABLE``: a stack that adds a cache keeps its table, and the URL is the
    opt-in. Neither set, or a URL of another scheme, raises :class:`ConfigError`.

    Example
    -------
    >>> from_env({"CIRCUIT_BREAKER_TABLE": "CircuitBreakers"}).table_name
    'CircuitBreakers'
    >>> from_env({"CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
    ...           "CIRCUIT_BREAKER_REDIS_URL": "redis://cache:6379"})
    RedisStore(key_prefix='fleetbreaker')
    """
    env = os.environ if environ is None else environ
    url = env.get(URL_ENV, "").strip()
    if url:
        if not url.startswith(REDIS_SCHEMES):
            raise ConfigError(f"{URL_ENV} must be a redis:// or rediss:// URL, got {url!r}")
        from fleetbreaker.stores.redis import RedisStore

        return RedisStore(url=url)
    table = env.get(TABLE_ENV, "").strip()
    if table:
        from fleetbreaker.stores.dynamodb import DynamoDBStore

        return DynamoDBStore(table, endpoint_url=endpoint_url)
    raise ConfigError(
        f"CircuitBreaker needs a store: pass store=DynamoDBStore(...), RedisStore(...) or "
        f"MemoryStore(), or set {TABLE_ENV} to use DynamoDB ({URL_ENV} for Redis)"
    )
