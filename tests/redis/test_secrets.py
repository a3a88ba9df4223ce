"""No password, token or signed URL in any output: a password-bearing Redis URL and an
ElastiCache IAM token run through every path, and every output is searched for them.

The paths: store construction (a malformed URL, an ssl=False conflict, another scheme), the
store variables (``stores.from_env``, ``StoreSettings``' repr), a breaker whose store refuses
the login (a real redis-server with ACL users), with its logs, EMF metrics, OpenTelemetry
spans and X-Ray subsegments, and the CLI's commands, as a process and in this process.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import pytest
import redis
from botocore.credentials import Credentials

from devtools.servers import RedisServer
from fleetbreaker import BreakerConfig, CircuitBreaker, ConfigError, RedisStore
from fleetbreaker.events import LoggingListener
from fleetbreaker.metrics import MetricsListener
from fleetbreaker.stores import StoreSettings, from_env
from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth
from fleetbreaker.tracing import OpenTelemetryListener, TracingListener
from tests.cli.conftest import POLICY, run_cli, run_in_process
from tests.observability.capture import Traces
from tests.observability.support import CapturingEmitter
from tests.support import FakeClock

# A password with the characters URLs mangle: '@' and '/' are written percent-encoded in the
# URL, as a URL requires; the decoded form must not appear either.
PASSWORD = "S3cr3t@pa/ss-9f2c"
WRITTEN = quote(PASSWORD, safe="")
CREDENTIALS = Credentials("AKIDSECRETKEYID", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRET", "SESSIONTOKEN")


def url(port: int | str, scheme: str = "redis") -> str:
    return f"{scheme}://app:{WRITTEN}@127.0.0.1:{port}/0"


def assert_no_secret(outputs: Iterable[str], *secrets: str) -> None:
    text = "\n".join(outputs)
    assert text.strip(), "no output at all: nothing was checked"
    for secret in (PASSWORD, WRITTEN, *secrets):
        assert secret not in text, f"{secret!r} leaked"


@pytest.fixture
def acl_server(redis_factory: Callable[[], RedisServer]) -> RedisServer:
    """A private redis-server whose user ``app`` has another password, default user off."""
    server = redis_factory()
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">the-right-one", "~*", "&*", "+@all")
    admin.execute_command("ACL", "SETUSER", "admin", "on", ">admin", "~*", "&*", "+@all")
    admin.execute_command("AUTH", "admin", "admin")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    admin.close()
    return server


# -- construction and the store variables -------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: RedisStore(url=url("notaport")), "invalid Redis url"),
        (lambda: RedisStore(url=url(6379, "rediss"), ssl=False), "ssl=False contradicts"),
        (lambda: RedisStore(url=url(6379, "http")), "must start with redis://"),
        (lambda: RedisStore(url=url(6379), ssl_ca_certs="/ca.pem"), "needs TLS"),
        (lambda: from_env({"CIRCUIT_BREAKER_REDIS_URL": url(6379, "http")}), "must be a redis"),
        (lambda: from_env({"CIRCUIT_BREAKER_REDIS_URL": url("x")}), "invalid Redis url"),
    ],
)
def test_a_refused_url_is_named_without_its_password(build: Callable[[], Any], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        build()

    message = str(refused.value)
    assert says in message
    assert "app:***@127.0.0.1" in message or "***" not in message
    assert_no_secret([message, repr(refused.value)])


def test_store_settings_show_their_url_without_its_password() -> None:
    settings = StoreSettings.from_env({"CIRCUIT_BREAKER_REDIS_URL": url(6379)})

    assert "redis://app:***@127.0.0.1:6379/0" in repr(settings)
    assert_no_secret([repr(settings), str(settings)])
    assert settings.redis_url == url(6379)  # kept, only never shown


# -- a breaker whose store refuses the login ----------------------------------------------------


class Outputs:
    """Everything a breaker's listeners write: log records, EMF, spans and subsegments."""

    def __init__(self, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]):
        from aws_xray_sdk.core.context import Context
        from aws_xray_sdk.core.recorder import AWSXRayRecorder

        self.caplog = caplog
        self.capsys = capsys
        self.traces = Traces()
        self.metrics = MetricsListener(namespace="Test", service="secrets")
        self.emitter = CapturingEmitter()
        self.recorder = AWSXRayRecorder()
        self.recorder.configure(
            sampling=False,
            emitter=self.emitter,
            context=Context(context_missing="LOG_ERROR"),
            plugins=(),
        )
        self.listeners = [
            LoggingListener(),
            self.metrics,
            OpenTelemetryListener(tracer_provider=self.traces.provider),
            TracingListener(enabled=True, recorder=self.recorder),
        ]

    def run(self, breaker: CircuitBreaker) -> None:
        with self.caplog.at_level(logging.INFO, logger="fleetbreaker"):
            self.recorder.begin_segment("handler")
            with self.traces.tracer.start_as_current_span("handler"):
                breaker.call(lambda: "ok")
            self.recorder.end_segment()
        self.metrics.flush()

    def all(self) -> list[str]:
        logs = [record.getMessage() for record in self.caplog.records]
        logs += [json.dumps(vars(record), default=str) for record in self.caplog.records]
        spans = [span.to_json() for span in self.traces.exporter.get_finished_spans()]
        xray = [json.dumps(entity, default=str) for entity in self.emitter.sent]
        return [*logs, self.capsys.readouterr().out, *spans, *xray]


@pytest.fixture
def outputs(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> Outputs:
    return Outputs(caplog, capsys)


def breaker_on(store: RedisStore, outputs: Outputs) -> CircuitBreaker:
    return CircuitBreaker(
        "secrets",
        store=store,
        config=BreakerConfig(store_deadline_seconds=5),
        listeners=outputs.listeners,
        clock=FakeClock(),
        rng=random.Random(1),
    )


def test_a_refused_password_stays_out_of_logs_metrics_and_traces(
    acl_server: RedisServer, outputs: Outputs
) -> None:
    # GIVEN a breaker whose Redis URL carries a password the server refuses
    store = RedisStore(url=url(acl_server.port), socket_timeout=5)
    breaker = breaker_on(store, outputs)

    # WHEN a call runs: the store refuses the login, the breaker degrades
    outputs.run(breaker)
    store.close()

    # THEN every output tells of the refusal, and none holds the password
    assert breaker.degraded
    everything = outputs.all()
    assert any("store load failed" in text for text in everything)
    assert any("store_error" in text for text in everything)  # the span's outcome
    assert_no_secret(everything)


def test_an_iam_token_stays_out_of_logs_metrics_and_traces(
    acl_server: RedisServer, outputs: Outputs
) -> None:
    # GIVEN a breaker logging in with IAM tokens the server does not accept
    auth = ElastiCacheIAMAuth("app", "fleetbreaker-cache", "eu-west-1", credentials=CREDENTIALS)
    token = auth.token()
    store = RedisStore(
        url=f"redis://127.0.0.1:{acl_server.port}/0", credential_provider=auth, socket_timeout=5
    )
    breaker = breaker_on(store, outputs)

    # WHEN a call runs and the login is refused
    outputs.run(breaker)
    store.close()

    # THEN no output holds the token, its signature or the keys it was signed with
    signature = dict(pair.split("=", 1) for pair in token.split("?", 1)[1].split("&"))
    assert breaker.degraded
    assert_no_secret(
        outputs.all(),
        token,
        signature["X-Amz-Signature"],
        signature["X-Amz-Security-Token"],
        CREDENTIALS.secret_key,
    )


# -- the CLI ----------------------------------------------------------------------------------


def test_the_console_script_never_prints_the_password(acl_server: RedisServer) -> None:
    # GIVEN the CLI pointed at Redis with a password-bearing URL, as options and as variables
    env = {"AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"}  # no AWS: the local user acts
    runs = [
        run_cli(["--redis-url", url("notaport"), "list"], env),  # exit 2: malformed
        run_cli(["--redis-url", url(acl_server.port, "http"), "list"], env),  # exit 2: scheme
        run_cli(["--redis-url", url(acl_server.port), "status", "x"], env),  # exit 3: login
        run_cli(["--redis-url", url(acl_server.port), "open", "x"], env),
        run_cli(["list"], {**env, "CIRCUIT_BREAKER_REDIS_URL": url(acl_server.port)}),
        run_cli(["--endpoint-url", f"localhost:{WRITTEN}@x", "--table", "T", "list"], env),
    ]

    # THEN each fails in one line, and no line, on either stream, holds the password
    assert [result.code for result in runs] == [2, 2, 3, 3, 3, 2]
    assert_no_secret(result.out + result.err for result in runs)


def test_in_process_the_cli_never_prints_the_password(acl_server: RedisServer) -> None:
    commands = [["list"], ["status", "x"], ["watch", "x", "--json"], ["reset", "x"]]
    env = {"AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"}

    runs = [run_in_process(["--redis-url", url(acl_server.port), *c], env) for c in commands]

    assert {result.code for result in runs} == {3}
    assert_no_secret(result.out + result.err for result in runs)


def test_a_watch_s_store_error_line_is_shown_without_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a watch whose second read fails with an error quoting the URL (as a library may)
    from fleetbreaker import MemoryStore, State, StoreError
    from fleetbreaker.breaker import system_clock
    from fleetbreaker.cli import commands

    class FailsLater(MemoryStore):
        reads = 0

        def load(self, name: str, now_ms: int) -> Any:
            self.reads += 1
            if self.reads > 2:
                raise StoreError(f"Error connecting to {url(6379)}: refused")
            return super().load(name, now_ms)

    def watch(*more: str) -> Any:
        store = FailsLater()
        store.force_state("x", POLICY, system_clock(), State.FORCED_OPEN)
        monkeypatch.setattr(commands, "open_store", lambda args: (store, "Redis"))
        args = ["--redis-url", url(6379), "watch", "x", "--count", "2", "--interval", "0.001"]
        return run_in_process([*args, *more])

    runs = [watch(), watch("--json")]

    # THEN each watch shows the error, its URL without the password
    for result in runs:
        assert result.code == 0, result.err
        assert "app:***@127.0.0.1" in result.out
    assert_no_secret(result.out + result.err for result in runs)


# -- a password typed raw, with the characters a URL parser cuts at ------------------------------
# The docs allow a password written as it is. A URL parser ends the login at the first '/',
# '?' or '#' and reads the rest as a port, a path or a fragment; whatever it then quotes must
# not be either half of the password. Each password's halves are searched for as well.

RAW_PASSWORDS = [f"Zulu4{c}Alpha7Kilo" for c in "#/?@"]
HALVES = ("Zulu4", "Alpha7Kilo")


def raw_url(password: str, port: int | str, scheme: str = "redis") -> str:
    return f"{scheme}://someone:{password}@127.0.0.1:{port}/0"


def assert_no_half(outputs: Iterable[str], password: str) -> None:
    text = "\n".join(outputs)
    assert text.strip(), "no output at all: nothing was checked"
    for secret in (password, quote(password, safe=""), *HALVES):
        assert secret not in text, f"{secret!r} leaked"


@pytest.fixture(params=RAW_PASSWORDS, ids=["hash", "slash", "question", "at"])
def raw_password(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda pw: RedisStore(url=raw_url(pw, "notaport")), "Port could not be cast"),
        (lambda pw: RedisStore(url=raw_url(pw, 6379, "rediss"), ssl=False), "ssl=False"),
        (lambda pw: RedisStore(url=raw_url(pw, 6379, "http")), "must start with redis://"),
        (lambda pw: from_env({"CIRCUIT_BREAKER_REDIS_URL": raw_url(pw, "x")}), "invalid Redis"),
        (
            lambda pw: StoreSettings.from_env(
                {"CIRCUIT_BREAKER_REDIS_URL": raw_url(pw, "x")}
            ).open(),
            "invalid Redis",
        ),
        (
            lambda pw: CircuitBreaker.from_env(
                "secrets", environ={"CIRCUIT_BREAKER_REDIS_URL": raw_url(pw, "x")}
            ),
            "invalid Redis",
        ),
    ],
    ids=["construction", "ssl", "scheme", "from_env", "settings_open", "breaker_from_env"],
)
def test_a_raw_password_never_reaches_a_refusal(
    raw_password: str, build: Callable[[str], Any], says: str
) -> None:
    # GIVEN a URL whose password holds '#', '/', '?' or '@' as typed, and a port that is wrong
    # WHEN the store is built from it, on every path that builds one
    with pytest.raises(ConfigError) as refused:
        build(raw_password)

    # THEN the refusal says what is wrong, shows the URL's host, and holds no part of the password
    message = str(refused.value)
    assert says in message
    assert "someone:***@127.0.0.1" in message
    assert_no_half([message, repr(refused.value)], raw_password)


def test_a_raw_password_is_the_login_the_server_gets(
    redis_factory: Callable[[], RedisServer], raw_password: str
) -> None:
    # GIVEN a server whose user 'someone' has a password with '#', '/', '?' or '@' in it
    server = redis_factory()
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("ACL", "SETUSER", "someone", "on", f">{raw_password}", "~*", "+@all")
    admin.close()

    # WHEN a store logs in with the URL written with that password, raw
    store = RedisStore(url=raw_url(raw_password, server.port), socket_timeout=5)

    # THEN it reaches that server, logged in as that user (not a host made of the password)
    assert store.client.execute_command("ACL", "WHOAMI") in (b"someone", "someone")  # type: ignore[attr-defined]
    store.close()


def test_a_refused_raw_password_stays_out_of_the_breakers_logs(
    acl_server: RedisServer, outputs: Outputs, raw_password: str
) -> None:
    # GIVEN a breaker whose URL carries a raw password the server refuses
    store = RedisStore(url=raw_url(raw_password, acl_server.port), socket_timeout=5)
    breaker = breaker_on(store, outputs)

    # WHEN a call runs and the login is refused
    outputs.run(breaker)
    store.close()

    # THEN the logs, metrics and traces tell of it without any part of the password
    assert breaker.degraded
    assert_no_half(outputs.all(), raw_password)


def test_the_console_script_never_prints_part_of_a_raw_password(
    acl_server: RedisServer, raw_password: str
) -> None:
    # GIVEN the CLI given a URL with a raw password: malformed, and refused by the server
    env = {"AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"}
    runs = [
        run_cli(["--redis-url", raw_url(raw_password, "notaport"), "list"], env),
        run_cli(["--redis-url", raw_url(raw_password, "notaport"), "doctor"], env),
        run_cli(["--redis-url", raw_url(raw_password, acl_server.port), "list"], env),
        run_cli(["--redis-url", raw_url(raw_password, acl_server.port), "doctor"], env),
        run_cli(["doctor"], {**env, "CIRCUIT_BREAKER_REDIS_URL": raw_url(raw_password, "x")}),
    ]

    # THEN a malformed URL is a usage error, a refused login a failure, and no output holds
    # any part of the password
    assert [result.code for result in runs] == [2, 2, 3, 1, 2]
    assert_no_half((result.out + result.err for result in runs), raw_password)


def test_a_function_whose_init_fails_on_the_url_logs_no_part_of_the_password() -> None:
    # GIVEN the payment function's environment with a raw password holding all four
    # characters, and a port that is no number
    import os
    import subprocess
    import sys

    from devtools.servers import REPO_ROOT

    password = "Zulu4#x/y?z@Alpha7Kilo"
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO_ROOT / 'layer'}{os.pathsep}{REPO_ROOT}",
        "CIRCUIT_BREAKER_REDIS_URL": raw_url(password, "notaport"),
        "PAYMENT_API_URL": "http://127.0.0.1:9",
    }

    # WHEN its module is imported, as Lambda's init does
    init = subprocess.run(
        [
            sys.executable,
            "-c",
            "from devtools.functions import load_function\nload_function('payment')",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )

    # THEN the init fails on the URL, and what it writes (the runtime logs it) holds no part
    # of the password
    assert init.returncode != 0
    assert "invalid Redis url" in init.stderr
    assert_no_half([init.stdout, init.stderr], password)
