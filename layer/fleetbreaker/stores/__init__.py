"""Shared stores: each keeps one record per breaker and applies the rules atomically.

The store variables (``CIRCUIT_BREAKER_TABLE``, ``CIRCUIT_BREAKER_REDIS_URL``,
``CIRCUIT_BREAKER_REDIS_IAM_USER``, ``CIRCUIT_BREAKER_REDIS_IAM_CACHE``) are read through
:mod:`fleetbreaker.stores.variables` alone: functions pass their environment to :func:`from_env`
(or :meth:`StoreSettings.from_env`), the CLI maps its options into such an environment, and
the stores' own defaults (``DynamoDBStore(table_name=None)``, ``RedisStore(url=None)``) come
from here too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fleetbreaker.errors import ConfigError
from fleetbreaker.frozen import frozen
from fleetbreaker.stores.base import Store, StoreStats
from fleetbreaker.stores.fallback import FallbackStore
from fleetbreaker.stores.variables import (
    IAM_CACHE_ENV,
    IAM_USER_ENV,
    STORE_VARIABLES,
    TABLE_ENV,
    URL_ENV,
    default_redis_url,
    default_table_name,
)
from fleetbreaker.stores.variables import read as read_variable

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from fleetbreaker.stores.memory import MemoryStore

__all__ = [
    "IAM_CACHE_ENV",
    "IAM_USER_ENV",
    "STORE_VARIABLES",
    "TABLE_ENV",
    "URL_ENV",
    "FallbackStore",
    "MemoryStore",
    "Store",
    "StoreNotNamedError",
    "StoreSettings",
    "StoreStats",
    "default_redis_url",
    "default_table_name",
    "from_env",
]

REDIS_SCHEMES = ("redis://", "rediss://")


class StoreNotNamedError(ConfigError):
    """The environment names no store: neither a Redis URL nor a table."""


@frozen
class StoreSettings:
    """The shared store an environment names, read and checked, not yet connected.

    Parameters
    ----------
    table_name:
        The DynamoDB table (``CIRCUIT_BREAKER_TABLE``).
    redis_url:
        The Redis URL (``CIRCUIT_BREAKER_REDIS_URL``); when set it wins over the table.
    iam_user, iam_cache:
        The ElastiCache user to log in as with IAM authentication, and the cache its tokens
        are signed for (``CIRCUIT_BREAKER_REDIS_IAM_USER`` / ``_CACHE``): both or neither.
    region:
        The store's region: the table's, and the cache's for IAM tokens (``AWS_REGION``,
        else ``AWS_DEFAULT_REGION``; None: boto3's own resolution, a profile's region).

    Example
    -------
    >>> settings = StoreSettings.from_env({"CIRCUIT_BREAKER_TABLE": "CircuitBreakers"})
    >>> settings.table_name, settings.redis_url
    ('CircuitBreakers', None)
    """

    table_name: str | None = None
    redis_url: str | None = None
    iam_user: str | None = None
    iam_cache: str | None = None
    region: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StoreSettings:
        """The store variables of ``environ`` (default ``os.environ``), checked.

        A URL of another scheme than ``redis://``/``rediss://``, neither a URL nor a table,
        or one IAM variable without the other raises :class:`ConfigError` naming the
        variables.
        """
        env = os.environ if environ is None else environ
        url = read_variable(env, URL_ENV)
        table = read_variable(env, TABLE_ENV)
        user = read_variable(env, IAM_USER_ENV)
        cache = read_variable(env, IAM_CACHE_ENV)
        if url and not url.startswith(REDIS_SCHEMES):
            from fleetbreaker.redaction import redact_url

            raise ConfigError(
                f"{URL_ENV} must be a redis:// or rediss:// URL, got {redact_url(url)!r}"
            )
        if not url and not table:
            raise StoreNotNamedError(
                f"{TABLE_ENV} is required: set {TABLE_ENV} (or {URL_ENV}) to name the "
                "breakers' store, or pass store=DynamoDBStore(...), RedisStore(...) or "
                "MemoryStore()"
            )
        if url and bool(user) != bool(cache):
            raise ConfigError(
                f"IAM authentication needs both {IAM_USER_ENV} and {IAM_CACHE_ENV} "
                f"(got only {IAM_USER_ENV if user else IAM_CACHE_ENV})"
            )
        region = read_variable(env, "AWS_REGION") or read_variable(env, "AWS_DEFAULT_REGION")
        return cls(
            table_name=table or None,
            redis_url=url or None,
            iam_user=user or None,
            iam_cache=cache or None,
            region=region or None,
        )

    def __repr__(self) -> str:
        # The URL may hold the cache's password: settings get logged.
        from fleetbreaker.redaction import redact_url

        url = None if self.redis_url is None else redact_url(self.redis_url)
        return (
            f"StoreSettings(table_name={self.table_name!r}, redis_url={url!r}, "
            f"iam_user={self.iam_user!r}, iam_cache={self.iam_cache!r}, region={self.region!r})"
        )

    @property
    def description(self) -> str:
        """Where the breakers live, for messages: ``Redis (IAM user 'u')`` or ``table 'T'``."""
        if self.redis_url is not None:
            return "Redis" if self.iam_user is None else f"Redis (IAM user {self.iam_user!r})"
        return f"table {self.table_name!r}"

    def open(
        self,
        *,
        endpoint_url: str | None = None,
        boto3_client: DynamoDBClient | None = None,
        redis_options: Mapping[str, Any] | None = None,
        aws_credentials: Any = None,
    ) -> Store:
        """The store itself (no connection until its first operation).

        Parameters
        ----------
        endpoint_url:
            A local DynamoDB endpoint (moto, dynalite). Without it boto3 resolves the
            endpoint, which honours ``AWS_ENDPOINT_URL_DYNAMODB``.
        boto3_client:
            A ready DynamoDB client for a table store (the CLI's, with its region).
        redis_options:
            More keyword arguments for :class:`~fleetbreaker.stores.redis.RedisStore`
            (the CLI's longer socket timeouts, for instance).
        aws_credentials:
            botocore credentials the cache's IAM tokens are signed with (the CLI's
            ``--profile``); default: botocore's credential chain.
        """
        if self.redis_url is not None:
            from fleetbreaker.stores.redis import RedisStore, require_redis_py

            # Before the IAM signer, which subclasses one of redis-py's classes.
            require_redis_py(URL_ENV)
            options = dict(redis_options or {})
            if self.iam_user is not None and self.iam_cache is not None:
                from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth

                options["credential_provider"] = ElastiCacheIAMAuth(
                    self.iam_user, self.iam_cache, self.region, credentials=aws_credentials
                )
            cache = RedisStore(url=self.redis_url, **options)
            # A misconfigured store's errors name the variables that set it up.
            cache.configured_by = URL_ENV
            cache.credentials_by = URL_ENV if self.iam_user is None else IAM_USER_ENV
            return cache
        from fleetbreaker.stores.dynamodb import DynamoDBStore

        # The region of the environment read (AWS_REGION, then AWS_DEFAULT_REGION), not only
        # of os.environ, and whichever of the two is set: the pinned boto3 reads one.
        table = DynamoDBStore(
            self.table_name,
            boto3_client=boto3_client,
            endpoint_url=endpoint_url,
            region_name=self.region,
        )
        table.configured_by = TABLE_ENV
        return table


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

    With ``CIRCUIT_BREAKER_REDIS_IAM_USER`` (an ElastiCache user with IAM authentication) the
    store logs in as that user with tokens signed for the cache
    ``CIRCUIT_BREAKER_REDIS_IAM_CACHE`` names (:class:`~fleetbreaker.stores.elasticache_iam.
    ElastiCacheIAMAuth`, in the region of ``AWS_REGION``); one without the other is a
    :class:`ConfigError`.

    Another ``CIRCUIT_BREAKER_*`` variable (a misspelling, most likely) is logged once per
    process at WARNING with the nearest known name (under ``BREAKER_VERIFY_STORE=true``,
    :meth:`BreakerConfig.from_env` refuses it).

    Example
    -------
    >>> from_env({"CIRCUIT_BREAKER_TABLE": "CircuitBreakers"}).table_name
    'CircuitBreakers'
    >>> from_env({"CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
    ...           "CIRCUIT_BREAKER_REDIS_URL": "redis://cache:6379"})
    RedisStore(key_prefix='fleetbreaker')
    """
    env = os.environ if environ is None else environ
    check_store_variables(env)
    return StoreSettings.from_env(env).open(endpoint_url=endpoint_url)


def check_store_variables(environ: Mapping[str, str]) -> None:
    """Log an unknown ``CIRCUIT_BREAKER_*`` variable (a misspelt store variable, most likely)
    once per process at WARNING, with the nearest known name (:mod:`fleetbreaker.
    environment`). Refusing it under ``BREAKER_VERIFY_STORE=true`` is the config's part:
    ``BreakerConfig.from_env`` reads that variable and checks every prefix."""
    from fleetbreaker.environment import check_variables

    check_variables(environ, ("CIRCUIT_BREAKER_",), STORE_VARIABLES, strict_by=None)


def __getattr__(name: str) -> Any:
    # MemoryStore loads on first use (a store that degrades builds its local twin then).
    if name == "MemoryStore":
        from fleetbreaker.stores.memory import MemoryStore

        return MemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
