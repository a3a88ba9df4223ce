"""IAM authentication to ElastiCache (Valkey, Redis OSS) for RedisStore.

An ElastiCache user with IAM authentication has no password: a client sends AUTH with the
user's id and a token, a SigV4-presigned "connect" request for the cache and the user, signed
with the caller's IAM credentials and valid 15 minutes. ElastiCache checks the signature and
that the caller may ``elasticache:Connect`` to both. The token only matters when a connection
is opened (the connection then lives up to 12 hours), so one token serves every connection the
container opens until shortly before it expires.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from redis.credentials import CredentialProvider

from fleetbreaker.errors import ConfigError

SERVICE = "elasticache"
# ElastiCache refuses tokens presigned for longer.
MAX_EXPIRES_SECONDS = 900


def presign(
    host: str,
    params: dict[str, str],
    *,
    access_key: str,
    secret_key: str,
    session_token: str | None,
    region: str,
    expires: int,
    at: datetime,
) -> str:
    """A SigV4 query-presigned GET of ``http://{host}/?{params}``, signed at ``at`` (UTC),
    as ``{host}/?{query}`` (the presigned URL without its scheme: ElastiCache's token).

    Signature Version 4 as AWS documents it for query-string authentication: the request's
    own parameters, then the X-Amz-* ones, the canonical request over the sorted query, the
    host header alone and the empty body's SHA-256, and the key derived from the secret, the
    date, the region and the service. The signing time is the caller's, so the provider's
    clock decides when a token was made (and tests fix it).
    """
    stamp = at.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    scope = f"{day}/{region}/{SERVICE}/aws4_request"
    auth = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": f"{access_key}/{scope}",
        "X-Amz-Date": stamp,
        "X-Amz-Expires": str(expires),
        "X-Amz-SignedHeaders": "host",
    }
    if session_token is not None:
        auth["X-Amz-Security-Token"] = session_token
    pairs = [(_encode(k), _encode(v)) for k, v in (*params.items(), *auth.items())]
    canonical = "\n".join(
        (
            "GET",
            "/",
            "&".join(f"{k}={v}" for k, v in sorted(pairs)),
            f"host:{host.lower()}\n",
            "host",
            hashlib.sha256(b"").hexdigest(),
        )
    )
    to_sign = "\n".join(
        ("AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest())
    )
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, SERVICE, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    query = "&".join(f"{k}={v}" for k, v in pairs)
    return f"{host}/?{query}&X-Amz-Signature={signature}"


def _encode(text: str) -> str:
    """RFC 3986 percent-encoding, every character but the unreserved ones (SigV4's rule)."""
    return quote(text, safe="-_.~")


class ElastiCacheIAMAuth(CredentialProvider):
    """Credentials for redis-py that log in to ElastiCache as an IAM-authenticated user.

    Pass it to :class:`~fleetbreaker.stores.redis.RedisStore` as ``credential_provider``;
    redis-py calls :meth:`get_credentials` whenever it opens a connection.

    Parameters
    ----------
    user_id:
        The ElastiCache user's id (IAM authentication needs its name to be the same).
    cache_name:
        The serverless cache's name (or the replication group's id, with
        ``serverless=False``): the token is signed for it.
    region:
        The cache's AWS Region; defaults to ``AWS_REGION`` (set in Lambda), then
        ``AWS_DEFAULT_REGION``.
    serverless:
        True (default) for ElastiCache Serverless, False for a node-based replication group.
    credentials:
        botocore credentials to sign with; default: botocore's credential chain (in Lambda,
        the function role's), refreshed by botocore as they rotate.
    clock:
        Seconds since the epoch (default ``time.time``).
    expires_in:
        Seconds a token is valid, at most 900 (the default).
    renew_before:
        Seconds before a token expires when the next call makes a new one (default 60), so a
        connection is never opened with a token about to lapse.

    Example
    -------
    >>> auth = ElastiCacheIAMAuth("fleetbreaker-1a2b3c4d", "fleetbreaker-1a2b3c4d", "eu-west-1")
    >>> RedisStore(url="rediss://fleetbreaker-1a2b3c4d-x.serverless.euw1.cache.amazonaws.com:6379",
    ...            credential_provider=auth)
    RedisStore(key_prefix='fleetbreaker')
    """

    def __init__(
        self,
        user_id: str,
        cache_name: str,
        region: str | None = None,
        *,
        serverless: bool = True,
        credentials: Any = None,
        clock: Callable[[], float] = time.time,
        expires_in: int = MAX_EXPIRES_SECONDS,
        renew_before: float = 60.0,
    ) -> None:
        for label, value in (("user_id", user_id), ("cache_name", cache_name)):
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"ElastiCacheIAMAuth needs a non-empty {label}, got {value!r}")
        if region is None:
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not isinstance(region, str) or not region.strip():
            raise ConfigError(
                "ElastiCacheIAMAuth needs the cache's region: pass region= or set AWS_REGION"
            )
        if (
            isinstance(expires_in, bool)
            or not isinstance(expires_in, int)
            or not 1 <= expires_in <= MAX_EXPIRES_SECONDS
        ):
            raise ConfigError(
                f"expires_in must be whole seconds from 1 to {MAX_EXPIRES_SECONDS}, "
                f"got {expires_in!r}"
            )
        if (
            isinstance(renew_before, bool)
            or not isinstance(renew_before, (int, float))
            or not 0 <= renew_before < expires_in
        ):
            raise ConfigError(
                f"renew_before must be at least 0 and below expires_in ({expires_in}), "
                f"got {renew_before!r}"
            )
        self.user_id = user_id
        self.cache_name = cache_name
        self.region = region
        self.serverless = serverless
        self.expires_in = expires_in
        self.renew_before = float(renew_before)
        self._credentials = credentials
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at = 0.0

    def __repr__(self) -> str:
        return (
            f"ElastiCacheIAMAuth(user_id={self.user_id!r}, cache_name={self.cache_name!r}, "
            f"region={self.region!r})"
        )

    def get_credentials(self) -> tuple[str, str]:
        """The user id and a valid token, as redis-py sends them with AUTH."""
        return self.user_id, self.token()

    def token(self) -> str:
        """The current token: the cached one, or a new one when it is due for renewal."""
        with self._lock:
            now = self._clock()
            if self._token is None or now >= self._renew_at:
                self._token = self._sign(now)
                self._renew_at = now + self.expires_in - self.renew_before
            return self._token

    def forget(self) -> None:
        """Drop the cached token: the next connection signs a new one (after a restored
        snapshot, the token was signed at init, with the credentials of that time)."""
        with self._lock:
            self._token = None
            self._renew_at = 0.0

    def _sign(self, now: float) -> str:
        credentials = self._credentials
        if credentials is None:
            import botocore.session

            credentials = botocore.session.get_session().get_credentials()
            if credentials is None:
                raise ConfigError("ElastiCacheIAMAuth found no AWS credentials to sign with")
        frozen = getattr(credentials, "get_frozen_credentials", None)
        signing = frozen() if callable(frozen) else credentials
        params = {"Action": "connect", "User": self.user_id}
        if self.serverless:
            params["ResourceType"] = "ServerlessCache"
        return presign(
            self.cache_name,
            params,
            access_key=signing.access_key,
            secret_key=signing.secret_key,
            session_token=signing.token,
            region=self.region,
            expires=self.expires_in,
            at=datetime.fromtimestamp(now, tz=timezone.utc),
        )
