"""The store's self-check: what ``fleetbreaker doctor`` asks a DynamoDB table or a Redis cache.

Each check is one question with one answer (:class:`Check`), asked in order; a check that
cannot be asked because an earlier one failed is skipped, saying which. The checks go through
the store's own code (its client, its requests, its error translation), so what passes here
is what a breaker's calls will meet:

- DynamoDB: the endpoint answers and accepts the credentials (DescribeTable); the table
  exists and is ACTIVE; its key, TTL and encryption are the shape ``template.yaml`` declares
  (:mod:`fleetbreaker.stores.dynamodb_table`); a breaker's record can be read (GetItem); a
  fenced write applies (the store's own conditional UpdateItem, on a sentinel record removed
  afterwards).
- Redis: the server answers; the connection is TLS and its handshake verified the server's
  certificate (a certificate refused fails this check, naming the CA bundle, not the
  network); the store logged in (as the cache's IAM user, or a user with a password); its
  scripts load; a read and a fenced write (each one of its scripts) run.

A failed check names what to change as a *setting* (:data:`SETTINGS`), which the caller turns
into the option or variable that set it. Nothing on a breaker's path imports this module.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from fleetbreaker.errors import (
    ACCESS_DENIED,
    AUTHENTICATION_REFUSED,
    TABLE_NOT_FOUND,
    CorruptRecordError,
    StoreError,
    StoreMisconfiguredError,
)
from fleetbreaker.frozen import frozen
from fleetbreaker.policy import Policy
from fleetbreaker.record import State

if TYPE_CHECKING:
    from collections.abc import Callable

    from fleetbreaker.stores.base import AdminStore
    from fleetbreaker.stores.dynamodb import DynamoDBStore
    from fleetbreaker.stores.redis import RedisStore

    # What removes the sentinel record: a sentence saying how it went.
    Remover = Callable[[str], str]

# A check's status.
PASSED = "ok"
FAILED = "FAIL"
SKIPPED = "skip"

# What a failed check says to change: the store's name (TABLE, REDIS_URL), its login (IAM_USER
# for the cache's IAM user, URL_LOGIN for the user and password written in the Redis URL), the
# CA bundle the server's certificate is checked against (CA), the caller's AWS credentials or
# their IAM policy, the cache user's access string (ACCESS), or where the store is looked for
# (ENDPOINT: the region or the endpoint URL).
TABLE = "table"
REDIS_URL = "redis_url"
IAM_USER = "iam_user"
URL_LOGIN = "url_login"
CA = "ca"
CREDENTIALS = "credentials"
POLICY = "policy"
ACCESS = "access"
ENDPOINT = "endpoint"
SETTINGS = (TABLE, REDIS_URL, IAM_USER, URL_LOGIN, CA, CREDENTIALS, POLICY, ACCESS, ENDPOINT)

# The sentinel record the write check makes and removes: a name no breaker has, and a short
# TTL, so a sentinel the caller may not delete (breakers never need DeleteItem) is gone from
# every reader within a minute and from the table at DynamoDB's next TTL sweep.
SENTINEL_PREFIX = "fleetbreaker-doctor-"
SENTINEL_TTL_S = 60
_SENTINEL_POLICY = Policy(
    failure_threshold=1,
    window_ms=60_000,
    base_open_ms=1_000,
    backoff=1.0,
    max_open_ms=1_000,
    max_probes=1,
    successes_needed=1,
    lease_ms=1_000,
    ttl_s=SENTINEL_TTL_S,
)

# What to grant when a breaker's request is denied: what the managed policy of template.yaml
# (CircuitBreakersAccessPolicy) allows functions, and the cache user's access string.
_DYNAMODB_GRANT = (
    "allow dynamodb:GetItem and dynamodb:UpdateItem on the table (the stack's "
    "CircuitBreakersAccessPolicy); with a policy scoped to breaker names (PolicyBreakerNames), "
    "pass --name with one of them"
)
_REDIS_GRANT = (
    "give the cache's user the template's access string (BreakerCacheUser): the scripts' "
    "commands on keys fleetbreaker:*"
)


@frozen
class Check:
    """One question about the store, and its answer.

    ``status`` is :data:`PASSED`, :data:`FAILED` or :data:`SKIPPED`; ``detail`` what was found;
    for a failure, ``fix`` what to do and ``setting`` (one of :data:`SETTINGS`, or None when
    no setting of the caller's is to blame) what to change. ``unanswered``: the failure is
    the store giving no answer (weather, or a network between), not a setting it refused.
    """

    name: str
    status: str
    detail: str
    fix: str = ""
    setting: str | None = None
    unanswered: bool = False

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def passed(name: str, detail: str) -> Check:
    return Check(name, PASSED, detail)


def failed(
    name: str, detail: str, fix: str, setting: str | None, *, unanswered: bool = False
) -> Check:
    return Check(name, FAILED, detail, fix, setting, unanswered)


def skipped(name: str, why: str) -> Check:
    return Check(name, SKIPPED, why)


def sentinel_name() -> str:
    """A fresh sentinel record's name (no breaker of anyone's is named so)."""
    return SENTINEL_PREFIX + secrets.token_hex(4)


def run_checks(store: AdminStore, name: str | None, now_ms: int) -> list[Check]:
    """Every check of ``store`` in order; ``name``: the breaker whose record the read check
    reads (default: a sentinel's, which has none)."""
    from fleetbreaker.stores.dynamodb import DynamoDBStore
    from fleetbreaker.stores.redis import RedisStore

    if isinstance(store, DynamoDBStore):
        return dynamodb_checks(store, name, now_ms)
    if isinstance(store, RedisStore):
        return redis_checks(store, name, now_ms)
    return _read_and_write(store, name, now_ms, _no_remove, "", CREDENTIALS)


# --------------------------------------------------------------------------- DynamoDB


def dynamodb_checks(store: DynamoDBStore, name: str | None, now_ms: int) -> list[Check]:
    """The DynamoDB table's checks: reachable, table, key, ttl, encryption, read, write."""
    from fleetbreaker.stores import dynamodb_table
    from fleetbreaker.stores.dynamodb import KEY_ATTRIBUTE

    table = store.table_name
    client = store.client
    region = client.meta.region_name or "an unknown region"
    shape = ("key", "ttl", "encryption")
    try:
        description: Any = client.describe_table(TableName=table)["Table"]
    except Exception as exc:
        error = store.translate(exc)
        problem = error.problem if isinstance(error, StoreMisconfiguredError) else None
        if problem == TABLE_NOT_FOUND:
            return [
                passed("reachable", f"DynamoDB in {region} answered and accepted the credentials"),
                failed(
                    "table",
                    f"table {table!r} does not exist in {region}",
                    f"name a breaker table (in this region), or create one: fleetbreaker "
                    f"create-table {table}",
                    TABLE,
                ),
                *(skipped(check, "not checked: no table") for check in (*shape, "read", "write")),
            ]
        if problem != ACCESS_DENIED:
            return [
                _unreachable(error, f"DynamoDB in {region}"),
                *(skipped(c, "not checked: no answer") for c in ("table", *shape, "read", "write")),
            ]
        # Describing is an operator's permission, not a breaker's: the read and the write
        # still tell whether breakers can use the table.
        checks = [
            passed("reachable", f"DynamoDB in {region} answered and accepted the credentials"),
            failed(
                "table",
                f"not allowed to describe the table: {error}",
                "allow dynamodb:DescribeTable and dynamodb:DescribeTimeToLive on the table to "
                "check its shape (breakers never need them)",
                POLICY,
            ),
            *(skipped(check, "not checked: the table cannot be described") for check in shape),
        ]
        return checks + _dynamodb_read_and_write(store, name, now_ms)
    checks = [passed("reachable", f"DynamoDB in {region} answered and accepted the credentials")]
    status = description.get("TableStatus")
    if status in ("ACTIVE", "UPDATING"):
        checks.append(passed("table", f"table {table!r} is {status} in {region}"))
    else:
        checks.append(
            failed(
                "table",
                f"table {table!r} is {status}, not ACTIVE",
                "wait until it is ACTIVE and run doctor again",
                None,
            )
        )
    key = dynamodb_table.key_difference(description)
    checks.append(
        passed("key", f"partition key {KEY_ATTRIBUTE} (S) alone")
        if key is None
        else failed(
            "key",
            key,
            "this table cannot hold breakers: name a breaker table, or create one: "
            "fleetbreaker create-table NAME",
            TABLE,
        )
    )
    checks.append(_ttl_check(store, table))
    encryption = dynamodb_table.encryption_difference(description)
    checks.append(
        passed("encryption", "encrypted at rest with a KMS key")
        if encryption is None
        else failed(
            "encryption",
            encryption,
            f"aws dynamodb update-table --table-name {table} --sse-specification "
            "Enabled=true,SSEType=KMS",
            None,
        )
    )
    return checks + _dynamodb_read_and_write(store, name, now_ms)


def _dynamodb_read_and_write(store: DynamoDBStore, name: str | None, now_ms: int) -> list[Check]:
    return _read_and_write(store, name, now_ms, _delete_item(store), _DYNAMODB_GRANT, CREDENTIALS)


def _ttl_check(store: DynamoDBStore, table: str) -> Check:
    from botocore.exceptions import ClientError

    from fleetbreaker.stores import dynamodb_table
    from fleetbreaker.stores.dynamodb import TTL_ATTRIBUTE

    try:
        ttl = store.client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "UnknownOperationException":
            # dynalite has no TTL API: what the endpoint cannot say is not a failure.
            return skipped("ttl", "not checked: the endpoint has no DescribeTimeToLive")
        error = store.translate(exc)
        if isinstance(error, StoreMisconfiguredError) and error.problem == ACCESS_DENIED:
            return failed(
                "ttl",
                f"not allowed to read the table's TTL (dynamodb:DescribeTimeToLive): {error}",
                "allow dynamodb:DescribeTimeToLive on the table (breakers never need it)",
                POLICY,
            )
        return failed("ttl", f"DescribeTimeToLive failed: {error}", "run doctor again", None)
    difference = dynamodb_table.ttl_difference(ttl)
    if difference is None:
        return passed("ttl", f"TTL on {TTL_ATTRIBUTE}")
    return failed(
        "ttl",
        difference + " (idle breakers would never be deleted)",
        f"aws dynamodb update-time-to-live --table-name {table} --time-to-live-specification "
        f"Enabled=true,AttributeName={TTL_ATTRIBUTE}",
        None,
    )


def _delete_item(store: DynamoDBStore) -> Remover:
    def remove(sentinel: str) -> str:
        from botocore.exceptions import ClientError

        from fleetbreaker.stores.dynamodb import KEY_ATTRIBUTE

        try:
            store.client.delete_item(
                TableName=store.table_name,
                Key={KEY_ATTRIBUTE: {"S": sentinel}},
                ConditionExpression="attribute_exists(#k)",
                ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
            )
        except ClientError as exc:
            return _left_to_expire(store.translate(exc))
        return "removed (DeleteItem)"

    return remove


def _may_update(store: AdminStore, name: str) -> bool:
    """Whether UpdateItem on breaker ``name`` is allowed: a write fenced never to apply (on a
    random operation id) fails its condition when allowed, and is denied otherwise."""
    from fleetbreaker.stores.dynamodb import KEY_ATTRIBUTE, OP_ATTRIBUTE, DynamoDBStore

    if not isinstance(store, DynamoDBStore):
        return False
    from botocore.exceptions import ClientError

    never = secrets.token_hex(16)
    try:
        store.client.update_item(
            TableName=store.table_name,
            Key={KEY_ATTRIBUTE: {"S": name}},
            UpdateExpression="SET #op = :never",
            ConditionExpression="#op = :never",
            ExpressionAttributeNames={"#op": OP_ATTRIBUTE},
            ExpressionAttributeValues={":never": {"S": never}},
        )
    except ClientError as exc:
        return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"
    return True  # the record held that very id: impossible, and allowed all the same


# --------------------------------------------------------------------------- Redis


def redis_checks(store: RedisStore, name: str | None, now_ms: int) -> list[Check]:
    """The Redis cache's checks: reachable, tls, login, scripts, read, write.

    ``tls`` passes only once a handshake verified the server's certificate: the PING of the
    reachable check is that handshake, so a certificate refused there fails ``tls`` (naming
    the CA bundle), not ``reachable``.
    """
    from redis.exceptions import RedisError

    kwargs = _connection_kwargs(store)
    where = _address(kwargs)
    login = _login_setting(kwargs)
    tls = _tls_setup_check(store, kwargs)
    try:
        store.client.ping()  # type: ignore[attr-defined]
    except (RedisError, OSError) as exc:
        handshake = _handshake_failure(exc, kwargs, where)
        if handshake is not None:
            return [
                passed("reachable", f"a server at {where} accepted the connection"),
                tls if tls.failed else handshake,
                *(skipped(c, "not checked: no TLS session") for c in _AFTER_TLS),
            ]
        error = store.translate(exc, f"Redis at {where}") if isinstance(exc, RedisError) else exc
        if isinstance(error, StoreMisconfiguredError):
            # It answered, over the TLS the handshake verified: the login is what failed.
            return [
                passed("reachable", f"Redis at {where} answered"),
                _tls_verified(tls, kwargs),
                failed("login", str(error), *_login_fix(kwargs)),
                *(skipped(c, "not checked: not logged in") for c in ("scripts", "read", "write")),
            ]
        reach = "name a cache this machine can reach (a cache in a VPC answers only inside it)"
        if tls.status == PASSED:
            # A plain-text server never answers a TLS handshake: it waits for a command.
            reach += "; with rediss://, one that speaks TLS on that port"
        return [
            failed(
                "reachable",
                f"no answer from Redis at {where}: {error}",
                reach,
                REDIS_URL,
                unanswered=True,
            ),
            tls if tls.failed else skipped("tls", "not checked: no connection"),
            *(skipped(c, "not checked: no answer") for c in _AFTER_TLS),
        ]
    checks = [
        passed("reachable", f"Redis at {where} answered"),
        _tls_verified(tls, kwargs),
        _login_check(store, kwargs),
    ]
    try:
        loaded = store.upload_scripts()
    except StoreError as exc:
        grant = "the cache user's access string needs +script|load and +evalsha"
        checks.append(_store_failure("scripts", exc, grant, login, ACCESS))
        checks += [skipped(c, "not checked: the scripts did not load") for c in ("read", "write")]
        return checks
    checks.append(passed("scripts", f"{len(loaded)} scripts loaded, their SHA1s match"))
    remove = _delete_key(store)
    return checks + _read_and_write(store, name, now_ms, remove, _REDIS_GRANT, login, ACCESS)


# What cannot be checked without a TLS session.
_AFTER_TLS = ("login", "scripts", "read", "write")


def _connection_kwargs(store: RedisStore) -> dict[str, Any]:
    pool = getattr(store.client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    return dict(kwargs) if isinstance(kwargs, dict) else {}


def _address(kwargs: dict[str, Any]) -> str:
    if "host" not in kwargs:
        return "the client's server"
    return f"{kwargs['host']}:{kwargs.get('port', 6379)}"


def _tls_setup_check(store: RedisStore, kwargs: dict[str, Any]) -> Check:
    """What the client's settings say of TLS before any connection: a failure when they rule
    it out or leave the certificate unverified, else a pass that :func:`_tls_verified` words
    once a handshake has verified the certificate (a skip for a client passed in)."""
    pool = getattr(store.client, "connection_pool", None)
    connection_class = getattr(pool, "connection_class", None)
    if connection_class is None:
        return skipped("tls", "not checked: a client passed in, not built from a URL")
    if not any(c.__name__ == "SSLConnection" for c in connection_class.__mro__):
        return failed(
            "tls",
            "plain text (redis://): the breakers' traffic and the login cross the network "
            "unencrypted, and ElastiCache Serverless accepts TLS only",
            "use a rediss:// URL",
            REDIS_URL,
        )
    import ssl

    required = kwargs.get("ssl_cert_reqs", "required")
    if required not in ("required", ssl.CERT_REQUIRED):
        return failed(
            "tls",
            f"TLS, but the server's certificate is not verified (ssl_cert_reqs={required!r})",
            "verify the certificate: drop ssl_cert_reqs from the URL",
            REDIS_URL,
        )
    return passed("tls", "")


def _trusted_cas(kwargs: dict[str, Any]) -> str:
    """The CA bundle a certificate is checked against, for messages."""
    if kwargs.get("ssl_ca_certs"):
        return f"the CA bundle ssl_ca_certs={kwargs['ssl_ca_certs']!r}"
    import os

    bundle = os.environ.get("SSL_CERT_FILE")
    if bundle:
        return f"the CA bundle SSL_CERT_FILE={bundle!r}"
    return "this machine's trusted CAs (SSL_CERT_FILE unset)"


def _tls_verified(setup: Check, kwargs: dict[str, Any]) -> Check:
    """The tls check once a handshake completed: verified, as the settings required."""
    if setup.status != PASSED:
        return setup
    hostname = (
        "and that it names the host"
        if kwargs.get("ssl_check_hostname", True)
        else "but not the host it names (ssl_check_hostname off)"
    )
    return passed(
        "tls",
        f"TLS (rediss://): the handshake verified the server's certificate against "
        f"{_trusted_cas(kwargs)}, {hostname}",
    )


def _handshake_failure(exc: BaseException, kwargs: dict[str, Any], where: str) -> Check | None:
    """The tls check's failure when ``exc`` is a TLS handshake that failed; None otherwise."""
    import ssl

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        reason = cause.verify_message or str(cause)
        if "hostname" in reason.lower() or "ip address mismatch" in reason.lower():
            return failed(
                "tls",
                f"the TLS handshake with {where} refused the server's certificate: {reason} "
                "(CERTIFICATE_VERIFY_FAILED)",
                "connect with a host name the certificate names",
                REDIS_URL,
            )
        return failed(
            "tls",
            f"the TLS handshake with {where} refused the server's certificate: {reason} "
            f"(CERTIFICATE_VERIFY_FAILED), checked against {_trusted_cas(kwargs)}",
            "trust the CA that signed the server's certificate: a CA bundle holding it",
            CA,
        )
    return failed(
        "tls",
        f"the TLS handshake with {where} failed: {cause}",
        "a rediss:// URL needs a server that speaks TLS on that port",
        REDIS_URL,
    )


def _login_check(store: RedisStore, kwargs: dict[str, Any]) -> Check:
    provider = kwargs.get("credential_provider")
    user_id = getattr(provider, "user_id", None)
    if isinstance(user_id, str):
        cache = getattr(provider, "cache_name", "?")
        return passed("login", f"logged in as IAM user {user_id!r} (tokens for cache {cache!r})")
    if provider is not None or kwargs.get("username"):
        user = kwargs.get("username") or "the credential provider's user"
        return passed("login", f"logged in as {user!r} with a password (not IAM)")
    if kwargs.get("password"):
        return passed("login", "logged in as the default user with a password (not IAM)")
    return failed(
        "login",
        "no login: the server let in a client that sent no credentials, so does anyone who "
        "reaches it",
        "log in as the cache's IAM user (the stack's cache admits no one else)",
        IAM_USER,
    )


def _login_setting(kwargs: dict[str, Any]) -> str:
    """What set the login the cache is sent: the IAM user, or the URL's user and password."""
    provider = kwargs.get("credential_provider")
    if isinstance(getattr(provider, "user_id", None), str):
        return IAM_USER
    if kwargs.get("username") or kwargs.get("password"):
        return URL_LOGIN
    return IAM_USER


def _login_fix(kwargs: dict[str, Any]) -> tuple[str, str]:
    setting = _login_setting(kwargs)
    if setting == URL_LOGIN:
        return "use a user and password the cache has", URL_LOGIN
    if kwargs.get("credential_provider") is not None:
        return "log in as a user the cache has, with its credentials", IAM_USER
    return "the cache requires a login: log in as its IAM user", IAM_USER


def _delete_key(store: RedisStore) -> Remover:
    def remove(sentinel: str) -> str:
        from redis.exceptions import RedisError

        try:
            store.client.delete(store.key(sentinel))  # type: ignore[attr-defined]
        except RedisError as exc:
            return _left_to_expire(store.translate(exc, "Redis DEL"))
        return "removed (DEL)"

    return remove


# --------------------------------------------------------------------------- both


def _no_remove(sentinel: str) -> str:
    return f"left to expire within {SENTINEL_TTL_S} s"


def _left_to_expire(error: StoreError) -> str:
    return (
        f"not removed ({error}): it expires within {SENTINEL_TTL_S} s (breakers never "
        "need to delete)"
    )


def _read_and_write(
    store: AdminStore,
    name: str | None,
    now_ms: int,
    remove: Remover,
    grant: str,
    login: str,
    denied: str = POLICY,
) -> list[Check]:
    """The read check (breaker ``name``'s record, or a sentinel's) and the write check (a
    fenced write on a sentinel record, then removed by ``remove``). ``grant`` says what to
    allow when a request is denied and ``denied`` which setting grants it, ``login`` which
    setting to change when a login is refused.
    """
    subject = name or sentinel_name()
    try:
        record = store.load(subject, now_ms)
    except CorruptRecordError as exc:
        read = passed(
            "read",
            f"read breaker {subject!r}: its record is unreadable ({exc}); "
            "the next write replaces it",
        )
    except StoreError as exc:
        read = _store_failure("read", exc, grant, login, denied)
        if isinstance(exc, StoreMisconfiguredError) and exc.problem != ACCESS_DENIED:
            return [read, skipped("write", "not checked: the read showed the store is wrong")]
    else:
        if name is None:
            read = passed("read", f"a record can be read: the sentinel {subject!r} has none")
        else:
            found = "no record (closed)" if record is None else record.state.value
            read = passed("read", f"read breaker {subject!r}: {found}")
    return [read, _write_check(store, name, now_ms, remove, grant, login, denied)]


def _write_check(
    store: AdminStore,
    name: str | None,
    now_ms: int,
    remove: Remover,
    grant: str,
    login: str,
    denied: str,
) -> Check:
    sentinel = sentinel_name()
    try:
        outcome = store.force_state(sentinel, _SENTINEL_POLICY, now_ms, State.CLOSED)
    except StoreError as exc:
        refused = isinstance(exc, StoreMisconfiguredError) and exc.problem == ACCESS_DENIED
        if refused and name is not None and _may_update(store, name):
            return passed(
                "write",
                f"a fenced UpdateItem on breaker {name!r} is allowed (sent to change "
                f"nothing); one on the sentinel {sentinel!r} was denied: the policy is scoped "
                "to breaker names",
            )
        return _store_failure("write", exc, grant, login, denied)
    if outcome.record is None:
        return failed(
            "write",
            f"a fenced write on the sentinel {sentinel!r} answered no record",
            "run doctor again; the store is not answering as a breaker table does",
            None,
        )
    return passed("write", f"fenced write on the sentinel {sentinel!r} applied; {remove(sentinel)}")


def _store_failure(
    check: str, exc: StoreError, grant: str, login: str, denied: str = POLICY
) -> Check:
    """A read, write or scripts check failed with the store's error ``exc``: ``grant`` says
    what to allow when it was denied (``denied``: the setting that grants it), ``login`` what
    to change when the login was refused."""
    if not isinstance(exc, StoreMisconfiguredError):
        return failed(
            check,
            f"no answer: {exc}",
            "run doctor again; if it persists, check the network and the store's health",
            None,
            unanswered=True,
        )
    if exc.problem == ACCESS_DENIED:
        return failed(check, str(exc), grant, denied)
    if exc.problem == AUTHENTICATION_REFUSED:
        return failed(check, str(exc), "use credentials the store accepts", login)
    return failed(check, str(exc), "name a breaker table", TABLE)


def _unreachable(error: Exception, where: str) -> Check:
    if isinstance(error, StoreMisconfiguredError) and error.problem == AUTHENTICATION_REFUSED:
        return failed(
            "reachable",
            str(error),
            "use credentials AWS accepts",
            CREDENTIALS,
        )
    return failed(
        "reachable",
        f"no answer from {where}: {error}",
        "check the region and the endpoint (and the network)",
        ENDPOINT,
        unanswered=True,
    )
