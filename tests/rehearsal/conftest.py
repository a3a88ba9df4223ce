"""The deploy rehearsal: one stack per parameter set on its own moto server, its functions run
as deployed (devtools/rehearsal.py says what is added to their environment and why).

Each parameter set is deployed once per session, on first use, with its own moto server, fake
payment API (the stack's PaymentApiUrl) and, with the Redis store, a TLS redis-server holding
the cache's users; everything is stopped at the end of the session.
"""

from __future__ import annotations

import io
import time
import uuid
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.payment_api import FakePaymentApi
from devtools.rehearsal import (
    Credentials,
    DeployedFunction,
    ElastiCacheLikeRedis,
    LambdaContainer,
    RehearsalError,
    RehearsalMotoServer,
    client,
    container_environment,
    create_admin,
    create_principal,
    create_stack,
    enforce_iam,
    put_alarms,
    read_functions,
    stack_resources,
)
from devtools.sam_template import BUCKET, condition_values, load_template, translate
from devtools.servers import REPO_ROOT, make_certificates
from fleetbreaker import BreakerConfig
from fleetbreaker.view import MAX_REFRESH_STRETCH
from tests.conftest import _start
from tests.sam.test_rehearsal import for_moto

DEFAULT_CACHE_TTL = BreakerConfig().cache_ttl

pytestmark = pytest.mark.rehearsal

STACK = "fleetbreaker"
SUBNETS = "subnet-0123456789abcdef0,subnet-0fedcba9876543210"
SECURITY_GROUPS = "sg-0123456789abcdef0"
BREAKER = "payment-api"  # the template's BreakerName default, which every event names
PARAMETER_SETS: dict[str, dict[str, str]] = {
    "default": {},
    "defer": {"OpenCircuitMode": "defer"},
    "redis": {
        "BreakerStore": "redis",
        "BreakerCacheSubnetIds": SUBNETS,
        "BreakerCacheSecurityGroupIds": SECURITY_GROUPS,
        "OpenCircuitMode": "defer",
    },
    "rate": {
        "FailureRateThreshold": "0.5",
        "MinimumCalls": "4",
        "SlowCallDurationSeconds": "2.5",
        "SlowCallRateThreshold": "0.5",
    },
    "core": {"DeployExample": "false"},
    # The breaker functions snapshotted, their callers on the live alias (moto invokes the
    # function itself: tests/sam/test_rehearsal.py), on the python3.12 layers.
    "snapstart": {"SnapStart": "PublishedVersions", "Runtime": "python3.12"},
}
EXAMPLE_SETS = [name for name in PARAMETER_SETS if name != "core"]
# The sets whose payment function defers instead of rejecting, with the consumer deployed.
DEFER_SETS = [name for name in EXAMPLE_SETS if PARAMETER_SETS[name].get("OpenCircuitMode")]


def _code_zip() -> bytes:
    # moto stores the code and never runs it: the containers run the repository's code.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def lambda_handler(event, context):\n    return event\n")
    return buffer.getvalue()


@dataclass
class Rehearsal:
    """One parameter set, deployed on its own moto server, with its local services."""

    name: str
    parameters: dict[str, str]
    moto: RehearsalMotoServer
    api: FakePaymentApi
    admin: Credentials
    translated: dict[str, Any]
    resources: dict[str, str]
    functions: dict[str, DeployedFunction]
    principals: dict[str, Credentials]
    cache: ElastiCacheLikeRedis | None
    # {logical id: name} of the stack's alarms (devtools.rehearsal.put_alarms)
    alarms: dict[str, str] = field(default_factory=dict)
    containers: list[LambdaContainer] = field(default_factory=list)
    warm: dict[str, LambdaContainer] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return self.moto.endpoint_url

    def client(self, service: str) -> Any:
        """A client signed as the admin (the rehearsal's own reads and writes)."""
        return client(self.endpoint, service, self.admin)

    def environment(self, logical_id: str) -> dict[str, str]:
        function = self.functions[logical_id]
        return container_environment(
            function,
            self.principals[logical_id],
            self.endpoint,
            self.cache,
            snapstart=self.snapstart(logical_id),
        )

    def snapstart(self, logical_id: str) -> bool:
        """Whether the function has SnapStart in this set (its template's ApplyOn)."""
        properties = self.translated["Resources"][logical_id]["Properties"]
        apply_on = properties.get("SnapStart", {}).get("ApplyOn", "None")
        if isinstance(apply_on, dict) and "Ref" in apply_on:
            name = apply_on["Ref"]
            apply_on = self.parameters.get(name, self.translated["Parameters"][name]["Default"])
        return bool(apply_on == "PublishedVersions")

    def container(
        self, logical_id: str, environment: dict[str, str] | None = None
    ) -> LambdaContainer:
        """A fresh, started execution environment of the function (stopped at session end)."""
        function = self.functions[logical_id]
        code_uri = load_template()["Resources"][logical_id]["Properties"]["CodeUri"]
        container = LambdaContainer(
            function,
            self.environment(logical_id) if environment is None else environment,
            REPO_ROOT / code_uri,
        )
        self.containers.append(container)
        return container.start()

    def containers_of(self, *logical_ids: str) -> list[LambdaContainer]:
        """Fresh containers of several functions, started in parallel (their inits overlap)."""
        with ThreadPoolExecutor(len(logical_ids)) as pool:
            return list(pool.map(self.container, logical_ids))

    def fleet(self) -> dict[str, LambdaContainer]:
        """One warm container per function, started together on first use and shared by the
        set's tests, as Lambda reuses a warm container (every test resets the breaker)."""
        # A container a failed test left on its local breaker is replaced: one failure, one
        # test failed.
        stale = [name for name, c in self.warm.items() if c.still_local or not c.running]
        for name in stale:
            self.warm.pop(name).stop()
        missing = sorted(set(self.functions) - set(self.warm))
        if missing:
            self.warm.update(zip(missing, self.containers_of(*missing), strict=True))
        return self.warm

    # -- the breaker's record, read and reset as an operator would (admin credentials)

    def store(self) -> Any:
        if self.cache is not None:
            from fleetbreaker import RedisStore

            return RedisStore(client=self.cache.admin_client())
        from fleetbreaker import DynamoDBStore

        return DynamoDBStore(
            self.resources["CircuitBreakersTable"], boto3_client=self.client("dynamodb")
        )

    def record(self, breaker: str = BREAKER) -> Any:
        import time

        return self.store().load(breaker, time.time_ns() // 1_000_000)

    def reset_breaker(self, breaker: str = BREAKER) -> None:
        """Delete the breaker's record, then let the warm containers' views of it go stale.

        The warm containers are shared by the set's tests: a view one read in the last test
        stays fresh for up to twice its BREAKER_CACHE_TTL (a view's longest stretch), and would
        answer the next test with the old record. Their breakers run on the system clock in
        processes of their own, so that time passes for real (2 s at the most, and only
        where a container was invoked within it).
        """
        if self.cache is not None:
            admin = self.cache.admin_client()
            for key in admin.scan_iter(match=f"fleetbreaker:{{{breaker}}}*"):
                admin.delete(key)
        else:
            self.client("dynamodb").delete_item(
                TableName=self.resources["CircuitBreakersTable"], Key={"name": {"S": breaker}}
            )
        for container in self.warm.values():
            if container.last_invoked is None:
                continue
            ttl = float(container.environment.get("BREAKER_CACHE_TTL", DEFAULT_CACHE_TTL))
            fresh_until = container.last_invoked + MAX_REFRESH_STRETCH * ttl
            time.sleep(max(0.0, fresh_until - time.monotonic()))

    def stop(self) -> None:
        for container in self.containers:
            container.stop()
        self.containers.clear()
        if self.cache is not None:
            self.cache.stop()
        self.api.stop()
        self.moto.stop()


def rehearse(name: str, certificates: Path) -> Rehearsal:
    """Deploy one parameter set and prepare its functions' principals (IAM then enforced)."""
    moto = _start(RehearsalMotoServer(validate_once=True))
    api = FakePaymentApi("ok", hold_timeout=5.0).start()
    try:
        return _deploy(name, certificates, moto, api)
    except BaseException:
        api.stop()
        moto.stop()
        raise


def _deploy(
    name: str, certificates: Path, moto: RehearsalMotoServer, api: FakePaymentApi
) -> Rehearsal:
    parameters = {**PARAMETER_SETS[name], "PaymentApiUrl": api.url}
    translated = translate(parameters)
    admin = create_admin(moto.endpoint_url)
    code = {
        f"s3://{BUCKET}/{resource}.zip": _code_zip() for resource in load_template()["Resources"]
    }
    create_stack(
        moto.endpoint_url,
        admin,
        STACK,
        for_moto(translated, parameters),
        parameters,
        code,
        condition_values(translated, parameters),
    )
    alarms = put_alarms(
        moto.endpoint_url,
        admin,
        STACK,
        translated,
        parameters,
        condition_values(translated, parameters),
    )
    functions = read_functions(moto.endpoint_url, admin, STACK)
    principals = {
        logical_id: create_principal(moto.endpoint_url, admin, function)
        for logical_id, function in functions.items()
    }
    enforce_iam(moto.endpoint_url)
    cache = None
    if "BreakerCacheUser" in translated["Resources"] and parameters.get("BreakerStore") == "redis":
        # The cache's one user, named as the stack names it (moto does not model the cache:
        # its Ref is the placeholder the functions' variables hold).
        access = translated["Resources"]["BreakerCacheUser"]["Properties"]["AccessString"]
        cache = _start(
            ElastiCacheLikeRedis(
                *make_certificates(certificates),
                iam_user="BreakerCacheUser.Ref",
                access_string=access.split(),
            )
        )
    return Rehearsal(
        name,
        parameters,
        moto,
        api,
        admin,
        translated,
        stack_resources(moto.endpoint_url, admin, STACK),
        functions,
        principals,
        cache,
        alarms,
    )


@pytest.fixture(scope="session")
def rehearsals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Rehearsal]]:
    made: dict[str, Rehearsal] = {}
    yield made
    # In parallel: each stop waits for its processes to exit.
    with ThreadPoolExecutor(max(1, len(made))) as pool:
        list(pool.map(Rehearsal.stop, made.values()))


_FAILED: dict[str, str] = {}


def _rehearsal(
    name: str, rehearsals: dict[str, Rehearsal], tmp_path_factory: pytest.TempPathFactory
) -> Rehearsal:
    # A set that failed to deploy fails its other tests at once, with the same message.
    if name in _FAILED:
        raise RehearsalError(_FAILED[name])
    if name not in rehearsals:
        try:
            rehearsals[name] = rehearse(name, tmp_path_factory.mktemp(f"tls-{name}"))
        except RehearsalError as exc:
            _FAILED[name] = f"parameter set {name!r}: {exc}"
            raise RehearsalError(_FAILED[name]) from None
    return rehearsals[name]


@pytest.fixture(params=EXAMPLE_SETS)
def rehearsal(
    request: pytest.FixtureRequest,
    rehearsals: dict[str, Rehearsal],
    tmp_path_factory: pytest.TempPathFactory,
) -> Rehearsal:
    """Every parameter set that deploys the example, its breaker reset for the test."""
    deployed = _rehearsal(request.param, rehearsals, tmp_path_factory)
    deployed.reset_breaker()
    deployed.api.mode = "ok"
    return deployed


@pytest.fixture(params=DEFER_SETS)
def defer_rehearsal(
    request: pytest.FixtureRequest,
    rehearsals: dict[str, Rehearsal],
    tmp_path_factory: pytest.TempPathFactory,
) -> Rehearsal:
    """The parameter sets with the deferred-payments consumer."""
    deployed = _rehearsal(request.param, rehearsals, tmp_path_factory)
    deployed.reset_breaker()
    deployed.api.mode = "ok"
    return deployed


@pytest.fixture
def snapstart_rehearsal(
    rehearsals: dict[str, Rehearsal], tmp_path_factory: pytest.TempPathFactory
) -> Rehearsal:
    """The parameter set with SnapStart on the functions that build a breaker."""
    deployed = _rehearsal("snapstart", rehearsals, tmp_path_factory)
    deployed.reset_breaker()
    deployed.api.mode = "ok"
    return deployed


@pytest.fixture
def default_set(
    rehearsals: dict[str, Rehearsal], tmp_path_factory: pytest.TempPathFactory
) -> Rehearsal:
    """The default parameter set alone (the cheapest with the example), its breaker reset."""
    deployed = _rehearsal("default", rehearsals, tmp_path_factory)
    deployed.reset_breaker()
    deployed.api.mode = "ok"
    return deployed


@pytest.fixture
def core_rehearsal(
    rehearsals: dict[str, Rehearsal], tmp_path_factory: pytest.TempPathFactory
) -> Rehearsal:
    return _rehearsal("core", rehearsals, tmp_path_factory)


def unique_key() -> str:
    return f"rehearsal-{uuid.uuid4().hex[:12]}"
