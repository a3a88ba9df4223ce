"""The store variables: their names, and the one place their values are read.

``CIRCUIT_BREAKER_TABLE`` names a breaker's DynamoDB table, ``CIRCUIT_BREAKER_REDIS_URL`` its
Redis, ``CIRCUIT_BREAKER_REDIS_IAM_USER`` and ``_IAM_CACHE`` the ElastiCache IAM login. A
leaf module (it imports only the list of names): the stores take their defaults from here
(``DynamoDBStore(table_name=None)``, ``RedisStore(url=None)``), and
:func:`fleetbreaker.stores.from_env` builds a store from them, without either importing the
other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Named with every other known variable (fleetbreaker.environment); read here alone.
from fleetbreaker.environment import (
    IAM_CACHE_ENV,
    IAM_USER_ENV,
    STORE_VARIABLES,
    TABLE_ENV,
    URL_ENV,
)

__all__ = [
    "IAM_CACHE_ENV",
    "IAM_USER_ENV",
    "STORE_VARIABLES",
    "TABLE_ENV",
    "URL_ENV",
    "default_redis_url",
    "default_table_name",
    "read",
]


def read(environ: Mapping[str, str] | None, variable: str) -> str:
    """One store variable's value, stripped ("" when unset); ``environ`` default os.environ."""
    env = os.environ if environ is None else environ
    return env.get(variable, "").strip()


def default_table_name() -> str:
    """``CIRCUIT_BREAKER_TABLE`` ("" when unset): the table of ``DynamoDBStore()``."""
    return read(None, TABLE_ENV)


def default_redis_url() -> str:
    """``CIRCUIT_BREAKER_REDIS_URL`` ("" when unset): the URL of ``RedisStore()``."""
    return read(None, URL_ENV)
