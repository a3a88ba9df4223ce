"""Redis store (ElastiCache, Valkey, Redis OSS): one hash per breaker, one Lua script per operation.

Each operation is a single EVALSHA. The script reads the breaker's hash, applies the rule
from rules.py and writes the whole record back, atomically on the server, so there is no
read-modify-write across the network and no retry loop: Redis runs one script at a time.
By default the scripts take the time from the server's TIME, so containers whose clocks
disagree still agree on when an open window or a probe lease ends.

Keys look like ``fleetbreaker:{payment-api}``: the breaker's name is the hash tag, so all of
a breaker's keys live in one slot of a Redis Cluster (or ElastiCache in cluster mode) and a
script never touches keys in two slots.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Protocol, cast

from fleetbreaker import record as schema
from fleetbreaker import rules
from fleetbreaker.errors import (
    ACCESS_DENIED,
    AUTHENTICATION_REFUSED,
    ConfigError,
    CorruptRecordError,
    StoreError,
    StoreMisconfiguredError,
)
from fleetbreaker.frozen import replace
from fleetbreaker.policy import Policy, check_weight
from fleetbreaker.record import Decision, Lease, Outcome, ProbeReport, Record, Report, State
from fleetbreaker.redaction import redact, redact_url, split_login, url_secrets
from fleetbreaker.stores.base import Listing, StoreStats
from fleetbreaker.stores.redis_scripts import load_scripts, policy_json
from fleetbreaker.stores.variables import URL_ENV, default_redis_url

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from fleetbreaker.record import Action

log = logging.getLogger("fleetbreaker")
# The scripts' integer rule: an optional minus and 1 to MAX_RECORD_DIGITS ASCII digits. Lua
# doubles hold 15 digits exactly; one digit of headroom keeps a counter the scripts accept from
# growing (gen + 1) into a value they would then reject.
_INTEGER = re.compile(rf"-?[0-9]{{1,{schema.MAX_RECORD_DIGITS}}}")
# `{`, `}` would end or start a hash tag early; `%` is escaped so the mapping stays one-to-one.
_KEY_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})
_KEY_UNESCAPES = {"%25": "%", "%7B": "{", "%7D": "}"}
_KEY_ESCAPED = re.compile("|".join(_KEY_UNESCAPES))
_GLOB_SPECIALS = str.maketrans({c: f"\\{c}" for c in "*?[]\\"})


class RedisClient(Protocol):
    """The two commands RedisStore needs; ``redis.Redis`` and ``redis.RedisCluster`` fit."""

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: str) -> Any: ...

    def script_load(self, script: str) -> Any: ...


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _integer(fields: dict[str, str], name: str) -> int:
    raw = fields.get(name)
    if raw is None or not _INTEGER.fullmatch(raw):
        raise CorruptRecordError(f"field {name!r} is missing or not an integer: {raw!r}")
    return int(raw)


def parse_fields(fields: dict[str, str]) -> Record | None:
    """Turn a breaker hash's fields (as the scripts return them) into a Record.

    None for no fields. Raises CorruptRecordError when the fields are not a record's.
    """
    if not fields:
        return None
    raw_state = fields.get(schema.STATE)
    try:
        state = State(raw_state)
    except ValueError:
        raise CorruptRecordError(
            f"field {schema.STATE!r} is not a breaker state: {raw_state!r}"
        ) from None
    numbers: dict[str, Any] = {
        attribute: _integer(fields, name) for attribute, name in schema.NUMBER_FIELDS.items()
    }
    # Added after the first release: absent or malformed reads as 0 (as the scripts do).
    for attribute, name in schema.OPTIONAL_NUMBER_FIELDS.items():
        raw = fields.get(name)
        numbers[attribute] = int(raw) if raw is not None and _INTEGER.fullmatch(raw) else 0
    leases: dict[int, Lease] = {}
    for slot in range(schema.MAX_PROBE_SLOTS):
        token_field, until_field, since_field = schema.lease_fields(slot)
        token = fields.get(token_field)
        until = fields.get(until_field)
        if token is not None and until is not None and _INTEGER.fullmatch(until):
            since = fields.get(since_field)
            granted = int(since) if since is not None and _INTEGER.fullmatch(since) else None
            leases[slot] = Lease(token, int(until), granted)
    quorum: dict[str, dict[str, int]] = {code: {} for code in schema.QUORUM_CODES}
    for field, value in fields.items():
        code, sep, container = field.partition(schema.QUORUM_SEPARATOR)
        if sep and code in quorum and container and _INTEGER.fullmatch(value):
            quorum[code][container] = int(value)

    def number(field: str) -> int | None:
        raw = fields.get(field)
        return int(raw) if raw is not None and _INTEGER.fullmatch(raw) else None

    window = schema.parse_window(number, quorum)
    texts: dict[str, Any] = {
        attribute: fields.get(name, "") for attribute, name in schema.TEXT_FIELDS.items()
    }
    return Record(state=state, leases=leases, **numbers, **texts, **window)


class RedisStore:
    """Keeps breakers in Redis: ElastiCache (Serverless or node-based), Valkey, Redis OSS.

    Parameters
    ----------
    client:
        A ready redis-py client, used as it is, with its own timeouts and retries: for
        example ``redis.cluster.RedisCluster`` for a node-based cluster in cluster mode.
        Socket timeouts looser than the store's (or none) get one log line; the breaker's
        ``store_deadline_seconds`` bounds every store operation whatever the client does.
    url:
        Where to connect when no client is given, e.g. ``rediss://my-cache.serverless.
        use1.cache.amazonaws.com:6379``; defaults to the ``CIRCUIT_BREAKER_REDIS_URL``
        environment variable. ``rediss://`` means TLS.
    key_prefix:
        Start of every key (default ``"fleetbreaker"``; no braces).
    socket_timeout, socket_connect_timeout:
        Seconds to wait for a reply and for a connection (default 0.2 each). The breaker
        never waits longer than about twice these before it falls back to local state.
    ssl:
        Force TLS on (True) or check it is off (False); None (default) follows the URL.
        ElastiCache Serverless always needs TLS.
    ssl_ca_certs:
        A CA bundle for the server's certificate, when the system's does not cover it.
    username, password:
        ElastiCache RBAC user (Redis 6 ACL) and its password, or ``password`` alone for
        AUTH. Credentials written in the URL take precedence.
    credential_provider:
        A redis-py ``CredentialProvider`` asked for the user and password whenever a
        connection opens, e.g. :class:`~fleetbreaker.stores.elasticache_iam.ElastiCacheIAMAuth`
        for an ElastiCache user with IAM authentication. Not with ``username``/``password``.
    use_server_time:
        Use the server's TIME as the clock inside the scripts (default True), so every
        container shares one clock. False uses the ``now_ms`` each caller passes, which
        tests with a fake clock need.

    Example
    -------
    >>> store = RedisStore(url="rediss://my-cache.example.com:6379")  # connects on first use
    >>> CircuitBreaker("payment-api", store=store)
    CircuitBreaker('payment-api', store=RedisStore)
    """

    def __init__(
        self,
        client: RedisClient | None = None,
        url: str | None = None,
        *,
        key_prefix: str = "fleetbreaker",
        socket_timeout: float = 0.2,
        socket_connect_timeout: float = 0.2,
        ssl: bool | None = None,
        ssl_ca_certs: str | None = None,
        username: str | None = None,
        password: str | None = None,
        credential_provider: Any = None,
        use_server_time: bool = True,
    ) -> None:
        if (
            not isinstance(key_prefix, str)
            or not key_prefix
            or "{" in key_prefix
            or "}" in key_prefix
        ):
            raise ConfigError(
                f"key_prefix must be a non-empty string without braces: {key_prefix!r}"
            )
        if credential_provider is not None:
            if not callable(getattr(credential_provider, "get_credentials", None)):
                # Its type, not its repr: a provider may show the secret it holds.
                raise ConfigError(
                    "credential_provider needs a get_credentials() method, got a "
                    f"{type(credential_provider).__name__}"
                )
            if username is not None or password is not None:
                raise ConfigError("RedisStore takes a credential_provider or username/password")
        for label, seconds in (
            ("socket_timeout", socket_timeout),
            ("socket_connect_timeout", socket_connect_timeout),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
                raise ConfigError(f"{label} must be a positive number of seconds, got {seconds!r}")
        self.key_prefix = key_prefix
        self.use_server_time = use_server_time
        self.stats = StoreStats()
        self._scripts = load_scripts()
        self._owns_client = client is None
        # What named the cache and what supplies the login, for the errors a misconfiguration
        # raises (StoreMisconfiguredError); StoreSettings.open names its variables instead.
        self.configured_by = "client" if client is not None else "url" if url else URL_ENV
        self.credentials_by = self.configured_by
        if client is not None:
            if url is not None:
                raise ConfigError("RedisStore takes a client or a url, not both")
            self.client: RedisClient = client
            _note_looser_client(client, float(socket_timeout), float(socket_connect_timeout))
        else:
            self.client = _make_client(
                url if url is not None else default_redis_url(),
                socket_timeout=float(socket_timeout),
                socket_connect_timeout=float(socket_connect_timeout),
                ssl=ssl,
                ssl_ca_certs=ssl_ca_certs,
                username=username,
                password=password,
                credential_provider=credential_provider,
            )

    def __repr__(self) -> str:
        return f"RedisStore(key_prefix={self.key_prefix!r})"

    @property
    def sharing_identity(self) -> str | None:
        """The server, database and key prefix this store reaches (see
        :mod:`fleetbreaker.stores.identity`); None for a client it cannot see into."""
        # At use, not import: only Managed Instances ask (a cold start elsewhere never does).
        from fleetbreaker.stores.identity import redis_identity

        return redis_identity(self.client, self.key_prefix)

    def drop_connections(self) -> None:
        """Disconnect every pooled connection, and forget the IAM token (after a restored
        snapshot: they belong to another process's time); the next command connects and
        logs in afresh.

        redis-py's public ``connection_pool.disconnect()`` (``disconnect_connection_pools()``
        on a cluster client), for a client passed in as for one the store built: the client
        stays usable. redis-py starts a new pool by itself only when the pid changes, and a
        restored snapshot keeps it. The token of an
        :class:`~fleetbreaker.stores.elasticache_iam.ElastiCacheIAMAuth` (the provider that
        the client logs in with) is signed again for the next connection.
        """
        client = self.client
        pool = getattr(client, "connection_pool", None)
        disconnect = getattr(pool, "disconnect", None)
        if callable(disconnect):
            disconnect()
        else:
            every = getattr(client, "disconnect_connection_pools", None)
            if callable(every):
                every()
        kwargs = getattr(pool, "connection_kwargs", None)
        if kwargs is None and callable(getattr(client, "get_connection_kwargs", None)):
            kwargs = client.get_connection_kwargs()  # type: ignore[attr-defined]
        provider = kwargs.get("credential_provider") if isinstance(kwargs, dict) else None
        forget = getattr(provider, "forget", None)
        if callable(forget):
            forget()

    def close(self) -> None:
        """Close the connections of a client this store created (an injected one is yours)."""
        close = getattr(self.client, "close", None)
        if self._owns_client and callable(close):
            close()

    def key(self, name: str) -> str:
        """The Redis key of a breaker's record; its hash tag is the (escaped) name."""
        return f"{self.key_prefix}:{{{name.translate(_KEY_ESCAPES)}}}"

    def keys(self, name: str) -> tuple[str, ...]:
        """Every key the store uses for a breaker (all in one cluster slot)."""
        return (self.key(name),)

    def upload_scripts(self) -> list[str]:
        """SCRIPT LOAD every operation's script now; the operations' names, in order.

        The store does this by itself when the cache answers NOSCRIPT; ``fleetbreaker doctor``
        calls it to check the user may load them and the server runs them. A SHA1 the server
        gives back that is not the script's own is a StoreError (the cache is not Redis as
        the scripts know it).
        """
        from redis.exceptions import RedisError

        loaded = []
        for operation, script in self._scripts.items():
            try:
                sha = _text(self.client.script_load(script.source))
            except (RedisError, ConfigError) as exc:
                raise self.translate(exc, f"Redis SCRIPT LOAD of {operation} failed") from exc
            except OSError as exc:
                raise StoreError(f"Redis unreachable: {redact(str(exc))}") from exc
            if sha != script.sha:
                raise StoreError(
                    f"Redis SCRIPT LOAD of {operation} answered SHA1 {sha[:40]!r}, "
                    f"not the script's {script.sha}"
                )
            loaded.append(operation)
        return loaded

    # -- raw calls -------------------------------------------------------------------------

    def _now_arg(self, now_ms: int) -> str:
        return "" if self.use_server_time else str(int(now_ms))

    def _args(self, now_ms: int, policy: Policy, *rest: str) -> list[str]:
        """Every write's ARGV: the clock, the policy (one JSON object), the operation's own."""
        return [self._now_arg(now_ms), policy_json(policy), *rest]

    def _eval(self, operation: str, name: str, args: Sequence[str]) -> list[Any]:
        """One EVALSHA; after a server restart (NOSCRIPT) load the script and run it again."""
        from redis.exceptions import NoScriptError, RedisError

        script = self._scripts[operation]
        keys = self.keys(name)
        try:
            try:
                reply = self.client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                # The cache forgot its scripts (restart, failover, SCRIPT FLUSH): load it and
                # run again. Nothing ran the first time, so the retry cannot double-count.
                self.client.script_load(script.source)
                reply = self.client.evalsha(script.sha, len(keys), *keys, *args)
        except (RedisError, ConfigError) as exc:
            raise self.translate(exc, f"Redis {operation} failed for breaker {name!r}") from exc
        except OSError as exc:  # a custom client may let a socket error through
            raise StoreError(f"Redis unreachable for breaker {name!r}: {redact(str(exc))}") from exc
        if not isinstance(reply, list) or len(reply) < 6:
            raise StoreError(f"Redis {operation} for breaker {name!r} gave {reply!r}")
        return reply

    def translate(self, exc: Exception, what: str) -> StoreError:
        """The store error a failed command becomes: a :class:`StoreMisconfiguredError` when
        the login was refused or the user may not run the command (a setting must change),
        else a plain :class:`StoreError` (weather)."""
        from redis.exceptions import (
            AuthenticationError,
            AuthenticationWrongNumberOfArgsError,
            NoPermissionError,
        )

        named = self.credentials_by
        # A client's message may quote its URL: never with its password.
        detail = redact(str(exc))
        if isinstance(exc, (AuthenticationError, AuthenticationWrongNumberOfArgsError)):
            return StoreMisconfiguredError(
                f"{what}: the cache refused the login (set by {named}): {detail}",
                problem=AUTHENTICATION_REFUSED,
                variable=named,
            )
        if isinstance(exc, ConfigError):  # the credential provider's: no AWS credentials
            return StoreMisconfiguredError(
                f"{what}: no login for the cache (set by {named}): {detail}",
                problem=AUTHENTICATION_REFUSED,
                variable=named,
            )
        if isinstance(exc, NoPermissionError):
            return StoreMisconfiguredError(
                f"{what}: the cache's user (set by {named}) may not: {detail}",
                problem=ACCESS_DENIED,
                variable=named,
            )
        return StoreError(f"{what}: {detail}")

    def _outcome(self, operation: str, name: str, reply: list[Any]) -> Outcome:
        status, changed, before, after, token = (_text(v) for v in reply[:5])
        if status == "corrupt":
            raise CorruptRecordError(f"breaker {name!r} in Redis: {changed}")
        # Every record in an "ok" reply was parsed by the script itself, so a reply that does
        # not parse here is a garbled answer (a store error), never a corrupt record or "closed".
        try:
            if status != "ok" or changed not in ("0", "1") or len(reply) % 2:
                raise ValueError("not a reply of the fleetbreaker scripts")
            pairs = [_text(v) for v in reply[6:]]
            record = parse_fields(dict(zip(pairs[::2], pairs[1::2], strict=True)))
            transition = (State(before), State(after)) if before and after else None
        except (ValueError, CorruptRecordError) as exc:
            raise StoreError(
                f"Redis {operation} for breaker {name!r} gave a reply of the wrong shape "
                f"({exc}): {str(reply)[:80]}"
            ) from None
        return Outcome(record, changed=changed == "1", transition=transition, token=token or None)

    def _operation(self, operation: str, name: str, args: Sequence[str]) -> Outcome:
        self.stats.count_write()
        return self._outcome(operation, name, self._eval(operation, name, args))

    # -- the contract ----------------------------------------------------------------------

    def load(self, name: str, now_ms: int) -> Record | None:
        self.stats.count_read()
        return self._outcome("load", name, self._eval("load", name, [self._now_arg(now_ms)])).record

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome:
        # `observed` is not needed: the script reads the current record under Redis' lock.
        check_weight(weight)
        return self._operation("record_failure", name, self._args(now_ms, policy, str(weight)))

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        self.stats.count_write()
        reply = self._eval("claim_probe", name, self._args(now_ms, policy, nonce))
        outcome = self._outcome("claim_probe", name, reply)
        if outcome.token is not None or not self.use_server_time:
            return outcome
        # Refused on the server's clock. A caller whose clock runs ahead would see the window
        # as ended and ask again on every call: tell it how long the server's answer holds.
        server_now = int(_text(reply[5]))
        verdict = rules.verdict(outcome.record, policy, server_now)
        if verdict.decision is not Decision.REJECT:
            return outcome
        return replace(outcome, retry_after_ms=verdict.retry_after_ms)

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        success = "r" if report.released else "1" if report.success else "0"
        args = self._args(now_ms, policy, report.token, success, repr(float(report.jitter)))
        return self._operation("settle_probe", name, args)

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        args = self._args(
            now_ms,
            policy,
            report.container,
            str(report.calls),
            str(report.failures),
            str(report.slow),
            "" if report.gen is None else str(report.gen),
        )
        return self._operation("report", name, args)

    def census(self, name: str, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        return self._operation("census", name, self._args(now_ms, policy))

    def force_state(
        self, name: str, policy: Policy, now_ms: int, target: State, *, action: Action | None = None
    ) -> Outcome:
        if target not in rules.FORCEABLE:
            raise ValueError(f"cannot force a breaker to {target.value!r}")
        args = self._args(now_ms, policy, target.value)
        if action is not None:
            args.append(action.encode())
        return self._operation("force_state", name, args)

    # -- operators -------------------------------------------------------------------------

    def name_of(self, key: str) -> str | None:
        """The breaker a key belongs to, or None for a key that is not a breaker's record."""
        head = f"{self.key_prefix}:{{"
        if not key.startswith(head) or not key.endswith("}"):
            return None
        escaped = key[len(head) : -1]
        if "{" in escaped or "}" in escaped:
            return None
        # One pass, so "%257B" (the escaped name "%7B") comes back as "%7B", not "{".
        return _KEY_ESCAPED.sub(lambda match: _KEY_UNESCAPES[match.group(0)], escaped)

    def list_records(self, now_ms: int) -> Iterator[Listing]:
        """Every breaker under ``key_prefix``: SCAN (never KEYS, which blocks the server)."""
        from redis.exceptions import RedisError

        pattern = f"{self.key_prefix.translate(_GLOB_SPECIALS)}:{{*}}"
        # SCAN is not in RedisClient: the breaker never needs it, only operators do.
        scan_iter = getattr(self.client, "scan_iter", None)
        if not callable(scan_iter):
            raise StoreError(f"{type(self.client).__name__} cannot SCAN: no scan_iter()")
        try:
            keys = sorted({_text(k) for k in cast("Any", scan_iter)(match=pattern, count=500)})
        except (RedisError, ConfigError) as exc:
            raise self.translate(exc, "Redis SCAN failed") from exc
        except OSError as exc:
            raise StoreError(f"Redis unreachable: {redact(str(exc))}") from exc
        for key in keys:
            name = self.name_of(key)
            if name is None:
                continue
            try:
                record = self.load(name, now_ms)
            except CorruptRecordError as exc:
                yield Listing(name, None, str(exc))
                continue
            if record is not None:
                yield Listing(name, record)

    def tune(
        self,
        name: str,
        policy: Policy,
        now_ms: int,
        tuned: str,
        action: Action | None,
        *,
        expected: str | None = None,
    ) -> Record | None:
        args = self._args(now_ms, policy, tuned, action.encode() if action is not None else "")
        if expected is not None:
            args.append(expected)
        return self._operation("tune", name, args).record


def _note_looser_client(client: Any, socket_timeout: float, connect_timeout: float) -> None:
    """Log one line when a passed client may wait longer than the store's own timeouts.

    The client is used as it is: the breaker's ``store_deadline_seconds`` bounds each store
    operation whatever the client's sockets do.
    """
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return
    looser = [
        f"{key}={kwargs.get(key)}"
        for key, limit in (
            ("socket_timeout", socket_timeout),
            ("socket_connect_timeout", connect_timeout),
        )
        if kwargs.get(key) is None or kwargs[key] > limit
    ]
    if looser:
        log.info(
            "fleetbreaker: the Redis client passed to RedisStore allows %s, more than the "
            "store's own; it is used as it is and the breaker's store_deadline_seconds bounds "
            "each store operation",
            ", ".join(looser),
        )


def require_redis_py(configured_by: str | None = None) -> None:
    """Raise :class:`ConfigError` when redis-py cannot be imported, saying where to get it.

    The slim layer carries the package alone, so a function on it that asks for Redis must
    learn at init which layer to attach rather than meet a bare ``ModuleNotFoundError`` (or,
    on the IAM path, one from deep inside the token signer). ``configured_by`` names the
    variable that chose Redis, when one did.
    """
    try:
        import redis  # noqa: F401  (its presence is the check; callers import what they use)
    except ImportError as exc:
        chosen = f"{configured_by} selects the Redis store, but " if configured_by else ""
        raise ConfigError(
            f"{chosen}RedisStore needs redis-py, which the slim fleetbreaker layer does not "
            "carry: attach the full layer (/<stack>/fleetbreaker/<runtime>/layer-arn) instead "
            "of the slim one, or bundle redis with your function "
            "(from a clone of fleetbreaker: pip install '.[redis]')"
        ) from exc


def _make_client(
    url: str,
    *,
    socket_timeout: float,
    socket_connect_timeout: float,
    ssl: bool | None,
    ssl_ca_certs: str | None,
    username: str | None,
    password: str | None,
    credential_provider: Any = None,
) -> RedisClient:
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"RedisStore needs a client or a url: pass client=/url= or set {URL_ENV}")
    require_redis_py()
    import redis
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.retry import Retry

    # Every message below quotes the URL without its password (it lands in init logs).
    given, shown = url, redact_url(url)
    # The login comes out before anything parses the URL: redis-py's parser cuts a password
    # typed raw at its first '/', '?' or '#' and quotes the rest in its errors (as a port,
    # say), or connects to a host made of it. Given to the client as options instead, the
    # password is never part of what it parses or quotes.
    address, url_user, url_password = split_login(url)
    if url_user is not None or url_password is not None:
        if credential_provider is not None:
            raise ConfigError(
                f"RedisStore takes a credential_provider or a login in the url, not both: {shown!r}"
            )
        # Credentials written in the URL take precedence, as redis-py gives them.
        username = url_user if url_user is not None else username
        password = url_password if url_password is not None else password
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in ("redis", "rediss"):
        raise ConfigError(f"Redis url must start with redis:// or rediss://, got {shown!r}")
    url = address
    if ssl is True and scheme == "redis":
        url = f"rediss://{rest}"
    elif ssl is False and scheme == "rediss":
        raise ConfigError(f"ssl=False contradicts the rediss:// url {shown!r}")
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_connect_timeout,
        # One quick retry on a broken connection: a Lambda container thawed after minutes
        # often holds a pooled connection the server has closed. No retry on a timeout: the
        # script may have run, and a second run would count a failure twice.
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        # No CLIENT SETINFO handshake: two fewer round trips on every new connection.
        "driver_info": None,
    }
    if username is not None:
        options["username"] = username
    if password is not None:
        options["password"] = password
    if credential_provider is not None:
        options["credential_provider"] = credential_provider
    if ssl_ca_certs is not None:
        if not url.startswith("rediss://"):
            raise ConfigError("ssl_ca_certs needs TLS: use a rediss:// url or ssl=True")
        options["ssl_ca_certs"] = ssl_ca_certs
    try:
        client: RedisClient = redis.Redis.from_url(url, **options)
    except (ValueError, TypeError) as exc:
        # redis-py's own message may quote any part of the URL, the password included.
        secrets = (*url_secrets(given), *(() if password is None else (password,)))
        raise ConfigError(
            f"invalid Redis url or options for {shown!r}: {redact(str(exc), secrets)}"
        ) from None
    return client
