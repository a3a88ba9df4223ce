"""IAM authentication to ElastiCache: ElastiCacheIAMAuth and RedisStore(credential_provider=).

ElastiCache checks a token's SigV4 signature itself; a redis-server cannot. So the server here
stands in with an ACL user (the template's BreakerCacheUser, with its access string) whose
password is the token the provider makes for fixed, injected credentials and a fixed clock,
and the default user switched off: only a client that sends that exact token as that user
gets in. The token's signature is checked separately against SigV4 computed here by hand.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from urllib.parse import parse_qsl, quote

import pytest
import redis
from botocore.credentials import Credentials

from devtools.servers import REPO_ROOT, RedisServer
from fleetbreaker import RedisStore
from fleetbreaker.errors import ConfigError, StoreError
from fleetbreaker.record import ProbeReport, State
from fleetbreaker.stores import from_env
from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth
from tests.support import STORE_CONFIG, make_policy

USER = "fleetbreaker-1a2b3c4d"
CACHE = "fleetbreaker-1a2b3c4d"
REGION = "eu-west-1"
CREDENTIALS = Credentials(
    "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "SESSION/TOKEN"
)
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NOW_MS = int(T0 * 1000)  # the breaker's clock in the caller-clock sequence
POLICY = make_policy(
    STORE_CONFIG,
    failure_threshold=2,
    recovery_timeout=0.001,
    recovery_backoff=1.0,
    max_recovery_timeout=0.001,
    probe_lease_seconds=60,
)


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_auth(clock: Clock) -> ElastiCacheIAMAuth:
    return ElastiCacheIAMAuth(USER, CACHE, REGION, credentials=CREDENTIALS, clock=clock)


def template_access_string() -> list[str]:
    from samcli.yamlhelper import yaml_parse

    template = yaml_parse((REPO_ROOT / "template.yaml").read_text())
    user = template["Resources"]["BreakerCacheUser"]["Properties"]
    assert user["AuthenticationMode"] == {"Type": "iam"}
    access: str = user["AccessString"]
    return access.split()


@pytest.fixture
def acl_server(
    redis_factory: Callable[[], RedisServer],
) -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A private redis-server whose only usable users are an admin and, once set, USER."""
    server = redis_factory()
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("ACL", "SETUSER", "admin", "on", ">admin-secret", "~*", "&*", "+@all")
    admin.execute_command("AUTH", "admin", "admin-secret")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    try:
        yield server, admin
    finally:
        admin.close()


def set_iam_user_password(admin: redis.Redis, token: str) -> None:
    admin.execute_command("ACL", "SETUSER", USER, "reset", *template_access_string(), f">{token}")


def iam_store(
    server: RedisServer, auth: ElastiCacheIAMAuth, *, use_server_time: bool = True
) -> RedisStore:
    return RedisStore(
        url=f"redis://127.0.0.1:{server.port}/0",
        credential_provider=auth,
        use_server_time=use_server_time,
    )


# -- against a server with ACL users -------------------------------------------------------


def test_the_store_logs_in_as_the_iam_user_and_runs_every_operation(
    acl_server: tuple[RedisServer, redis.Redis],
) -> None:
    # GIVEN a server whose IAM user accepts exactly the token the provider makes at T0, with
    # the access string the template gives the cache's user
    server, admin = acl_server
    clock = Clock()
    set_iam_user_password(admin, make_auth(Clock()).token())
    # (the caller's clock for the sequence, so it is deterministic; the server's for reads)
    store = iam_store(server, make_auth(clock), use_server_time=False)
    server_clock_store = iam_store(server, make_auth(clock))
    try:
        # WHEN the store trips, probes, closes, forces and lists a breaker
        store.record_failure("iam", POLICY, NOW_MS, None)
        opened = store.record_failure("iam", POLICY, NOW_MS, None)
        claimed = store.claim_probe("iam", POLICY, NOW_MS + 10, "nonce-1", None)
        token = claimed.token
        assert token is not None
        report = ProbeReport(token, True, 0.5)
        settled = store.settle_probe("iam", POLICY, NOW_MS + 20, report, None)
        forced = store.force_state("iam", POLICY, NOW_MS + 30, State.FORCED_OPEN)
        loaded = server_clock_store.load("iam", 0)
        listed = [listing.name for listing in server_clock_store.list_records(0)]
        # THEN each one ran as the IAM user, within its access string
        assert opened.transition == (State.CLOSED, State.OPEN)
        assert settled.record is not None
        assert settled.record.state is State.CLOSED
        assert forced.record is not None
        assert forced.record.state is State.FORCED_OPEN
        assert loaded is not None
        assert loaded.state is State.FORCED_OPEN
        assert listed == ["iam"]
        clients = admin.execute_command("CLIENT", "LIST").decode()
        assert f"user={USER}" in clients
    finally:
        store.close()
        server_clock_store.close()


def test_without_the_token_the_store_cannot_connect(
    acl_server: tuple[RedisServer, redis.Redis],
) -> None:
    # GIVEN the same server, and a store with no credentials (the default user is off)
    server, admin = acl_server
    set_iam_user_password(admin, make_auth(Clock()).token())
    store = RedisStore(url=f"redis://127.0.0.1:{server.port}/0")
    try:
        # WHEN it reads a breaker THEN the server refuses it: a store error
        with pytest.raises(StoreError):
            store.load("iam", 0)
    finally:
        store.close()


def test_new_connections_log_in_with_the_renewed_token(
    acl_server: tuple[RedisServer, redis.Redis],
) -> None:
    # GIVEN a store connected with the T0 token
    server, admin = acl_server
    clock = Clock()
    auth = make_auth(clock)
    set_iam_user_password(admin, auth.token())
    store = iam_store(server, auth)
    try:
        assert store.load("iam", 0) is None
        # WHEN the clock passes the renewal point, the server accepts only the new token, and
        # the store's connections are dropped
        clock.now = T0 + 900 - 60
        renewed = make_auth(Clock(clock.now)).token()
        set_iam_user_password(admin, renewed)
        store.client.connection_pool.disconnect()  # type: ignore[attr-defined]
        # THEN the store reconnects with the renewed token
        assert store.load("iam", 0) is None
        assert auth.token() == renewed
    finally:
        store.close()


# -- the token -----------------------------------------------------------------------------


def test_a_token_is_reused_until_its_renewal_point() -> None:
    clock = Clock()
    auth = make_auth(clock)
    first = auth.token()
    clock.now = T0 + 900 - 60 - 0.001
    assert auth.token() == first


def test_a_token_is_renewed_before_it_expires() -> None:
    # GIVEN a token made at T0 (valid 900 s) WHEN 60 s before its expiry a connection asks
    clock = Clock()
    auth = make_auth(clock)
    first = auth.token()
    clock.now = T0 + 900 - 60
    # THEN it gets a new token, signed at the new time
    second = auth.token()
    assert second != first
    assert query(second)["X-Amz-Date"] == "20260101T001400Z"
    assert auth.get_credentials() == (USER, second)


def test_a_forgotten_token_is_signed_anew_long_before_its_renewal() -> None:
    # GIVEN a token made at T0, and a restored snapshot 10 s later (fleetbreaker.restore)
    clock = Clock()
    auth = make_auth(clock)
    first = auth.token()
    clock.now = T0 + 10
    # WHEN the provider forgets its token
    auth.forget()
    # THEN the next connection gets one signed now
    assert query(auth.token())["X-Amz-Date"] == "20260101T000010Z"
    assert auth.token() != first


def query(token: str) -> dict[str, str]:
    host, _, rest = token.partition("/?")
    assert host == CACHE
    return dict(parse_qsl(rest, keep_blank_values=True))


def test_the_token_is_a_presigned_connect_request_for_the_cache_and_user() -> None:
    params = query(make_auth(Clock()).token())
    assert params["Action"] == "connect"
    assert params["User"] == USER
    assert params["ResourceType"] == "ServerlessCache"
    assert params["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert params["X-Amz-Credential"] == f"AKIDEXAMPLE/20260101/{REGION}/elasticache/aws4_request"
    assert params["X-Amz-Date"] == "20260101T000000Z"
    assert params["X-Amz-Expires"] == "900"
    assert params["X-Amz-SignedHeaders"] == "host"
    assert params["X-Amz-Security-Token"] == "SESSION/TOKEN"


def test_a_replication_group_token_has_no_resource_type() -> None:
    auth = ElastiCacheIAMAuth(
        USER, CACHE, REGION, serverless=False, credentials=CREDENTIALS, clock=Clock()
    )
    assert "ResourceType" not in query(auth.token())


def sigv4_signature(token: str) -> str:
    """The SigV4 query signature of the token's request, computed from the specification."""
    host, _, rest = token.partition("/?")
    pairs = [(k, v) for k, v in parse_qsl(rest, keep_blank_values=True) if k != "X-Amz-Signature"]
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(pairs)
    )
    canonical_request = "\n".join(
        ["GET", "/", canonical_query, f"host:{host}", "", "host", hashlib.sha256(b"").hexdigest()]
    )
    stamp = datetime.fromtimestamp(T0, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{stamp[:8]}/{REGION}/elasticache/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    key = f"AWS4{CREDENTIALS.secret_key}".encode()
    for part in (stamp[:8], REGION, "elasticache", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def test_the_token_carries_a_valid_sigv4_signature() -> None:
    token = make_auth(Clock()).token()
    assert query(token)["X-Amz-Signature"] == sigv4_signature(token)


# -- configuration -------------------------------------------------------------------------


def test_from_env_builds_the_iam_provider_when_the_user_is_named() -> None:
    store = from_env(
        {
            "CIRCUIT_BREAKER_REDIS_URL": "rediss://cache.example.com:6379",
            "CIRCUIT_BREAKER_REDIS_IAM_USER": USER,
            "CIRCUIT_BREAKER_REDIS_IAM_CACHE": CACHE,
            "AWS_REGION": REGION,
        }
    )
    assert isinstance(store, RedisStore)
    kwargs = store.client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    auth = kwargs["credential_provider"]
    assert isinstance(auth, ElastiCacheIAMAuth)
    assert (auth.user_id, auth.cache_name, auth.region) == (USER, CACHE, REGION)


def test_from_env_refuses_an_iam_user_without_its_cache() -> None:
    with pytest.raises(ConfigError, match="CIRCUIT_BREAKER_REDIS_IAM_CACHE"):
        from_env(
            {
                "CIRCUIT_BREAKER_REDIS_URL": "rediss://cache.example.com:6379",
                "CIRCUIT_BREAKER_REDIS_IAM_USER": USER,
            }
        )


def test_a_provider_and_a_password_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="credential_provider or username/password"):
        RedisStore(
            url="rediss://cache.example.com:6379",
            credential_provider=make_auth(Clock()),
            password="secret",
        )


@pytest.mark.parametrize("expires_in", [0, 901, 1.5])
def test_a_token_lifetime_elasticache_refuses_is_a_config_error(expires_in: object) -> None:
    with pytest.raises(ConfigError, match="expires_in"):
        ElastiCacheIAMAuth(USER, CACHE, REGION, expires_in=expires_in)  # type: ignore[arg-type]


@pytest.mark.parametrize("token", [None, "session-token/with+slash="])
@pytest.mark.parametrize("cache", ["fleetbreaker-1a2b3c4d", "Mixed-Case-Cache"])
def test_the_token_is_the_url_botocore_presigns_at_the_same_time(
    monkeypatch: pytest.MonkeyPatch, token: str | None, cache: str
) -> None:
    # GIVEN credentials, a cache and a signing time
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    at = datetime(2026, 12, 2, 3, 4, 5)
    auth = ElastiCacheIAMAuth(
        "user-1",
        cache,
        "eu-west-1",
        credentials=credentials,
        clock=lambda: at.replace(tzinfo=timezone.utc).timestamp(),
    )

    # WHEN botocore's own SigV4 query signer presigns the same connect request at that time
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: at)
    params = {"Action": "connect", "User": "user-1", "ResourceType": "ServerlessCache"}
    request = AWSRequest(method="GET", url=f"http://{cache}/", params=params)
    botocore.auth.SigV4QueryAuth(credentials, "elasticache", "eu-west-1", 900).add_auth(request)

    # THEN the token is that URL without its scheme, to the character
    assert auth.token() == request.prepare().url.removeprefix("http://")
