"""`sam build` on this machine (no Docker), and the built artifacts on every declared runtime.

The built layer and function are run the way Lambda lays them out: the function's code first
(/var/task), then the layer (/opt/python), then the runtime's boto3 (/var/runtime), and
nothing else: each interpreter starts isolated (-I -S), without its own site-packages.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from devtools.layer_sizes import tree_size, zipped_size
from devtools.payment_api import FakePaymentApi
from devtools.sam_template import layer_id, load_template, runtimes
from devtools.servers import REPO_ROOT, make_table, untraced_env
from tests.conftest import backend_unavailable
from tests.coverage_scope import untraced
from tests.sam.conftest import EVENTS
from tests.sam.test_template import pins

# The layer build's bytecode script (layer/ is not a package): its interpreter finder.
BUILD_SCRIPT = runpy.run_path(str(REPO_ROOT / "layer" / "compile_bytecode.py"))

# What the Lambda Python runtimes ship; the layer must not bring its own copy.
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six", "urllib3")


def declared_runtimes() -> list[str]:
    """The runtimes the template builds layers for (one full and one slim layer each)."""
    return runtimes(load_template())


def layer_dir(build_dir: Path, runtime: str, *, slim: bool = False) -> Path:
    """A built layer's /opt/python."""
    return build_dir / layer_id(runtime, slim=slim) / "python"


def cache_tag(runtime: str) -> str:
    """python3.13 -> cpython-313, the tag of its bytecode files."""
    return f"cpython-{runtime.removeprefix('python').replace('.', '')}"


@functools.cache
def find_interpreter(runtime: str) -> str | None:
    """An interpreter on this machine for a Lambda runtime name such as python3.12: the one
    the layer build compiles that runtime's bytecode with. Looked up once per process: the
    lookup runs each candidate (0.1 s of CPU a runtime), and the module asks over twenty
    times, nine of them at import (every worker imports it)."""
    found: str | None = BUILD_SCRIPT["interpreter"](runtime.removeprefix("python"))
    return found


BUILD_RUNTIME = "python3.11"  # the interpreter the build and the tests run on


def runtimes_here() -> list[str]:
    """The declared runtimes to check on this machine: python3.11 always (the build's own),
    each other one when an interpreter for it is installed (pyenv here), since the build must
    not depend on them."""
    return [r for r in declared_runtimes() if r == BUILD_RUNTIME or find_interpreter(r)]


def test_the_build_runtime_is_among_the_declared_ones() -> None:
    assert BUILD_RUNTIME in declared_runtimes()


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`sam build` with samconfig.toml's settings, into a temporary build and cache dir."""
    root = tmp_path_factory.mktemp("sam")
    started = time.monotonic()
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "sam"),
            "build",
            "--build-dir",
            str(root / "build"),
            "--cache-dir",
            str(root / "cache"),
        ],
        cwd=REPO_ROOT,
        # The build Makefiles' pip: this venv's, as `make build` passes it (sam and pip run
        # none of the measured code: untraced by coverage).
        env=untraced_env(PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    print(f"\nsam build: {elapsed:.1f} s")
    return root / "build"


def distributions_of(name: str) -> dict[str, importlib.metadata.Distribution]:
    """The distribution ``name`` in this venv and each one it needs, by canonical name."""
    found: dict[str, importlib.metadata.Distribution] = {}
    wanted = [name]
    while wanted:
        distribution = importlib.metadata.distribution(wanted.pop())
        key = canonicalize_name(distribution.metadata["Name"])
        if key in found:
            continue
        found[key] = distribution
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                wanted.append(requirement.name)
    return found


@pytest.fixture(scope="module")
def runtime_boto3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """boto3 and its dependencies alone in a directory: what the Lambda runtime provides, at
    the versions constraints.txt pins. They are this venv's, installed from those pins, and
    linked here with their bytecode, as the runtime ships them (installing them again into
    the directory cost 2.4 s of CPU, and each interpreter then compiled botocore)."""
    target = tmp_path_factory.mktemp("runtime")
    tested = pins(REPO_ROOT / "constraints.txt")
    for name, distribution in distributions_of("boto3").items():
        assert distribution.version == tested[name], (name, distribution.version)
        for top in {file.parts[0] for file in distribution.files or []} - {"..", "__pycache__"}:
            (target / top).symlink_to(str(distribution.locate_file(top)))
    # the very packages a layer must not bring a copy of (RUNTIME_PACKAGES)
    modules = {path.stem for path in target.iterdir() if path.suffix != ".dist-info"}
    assert modules == set(RUNTIME_PACKAGES), modules
    return target


@pytest.mark.parametrize("runtime", declared_runtimes())
def test_layer_holds_the_package_and_only_pure_python(build_dir: Path, runtime: str) -> None:
    layer = layer_dir(build_dir, runtime)
    assert (layer / "fleetbreaker" / "__init__.py").is_file()
    assert (layer / "fleetbreaker" / "py.typed").is_file()
    assert not [str(p) for p in layer.rglob("*.pyc") if pyc_flags(p) != CHECKED_HASH], (
        "bytecode that is not checked against its source"
    )
    # Nothing the runtime already has (a copy would shadow the runtime's boto3).
    present = {path.name for path in layer.iterdir()}
    assert not present & set(RUNTIME_PACKAGES)
    # Pure Python only: the same zip must work on arm64 and x86_64, on 3.11 to 3.13.
    assert not [str(p) for p in layer.rglob("*") if re.search(r"\.(so|pyd|dylib)$", p.name)]
    wheels = sorted(layer.glob("*.dist-info"))
    assert len(wheels) == len(pins(REPO_ROOT / "layer" / "requirements.txt"))
    for wheel in wheels:
        tags = re.findall(r"^Tag: (\S+)$", (wheel / "WHEEL").read_text(), re.MULTILINE)
        assert tags, wheel.name
        assert all(tag.endswith("-none-any") for tag in tags), (wheel.name, tags)


# A pyc's flags word (PEP 552): bit 0 hash-based, bit 1 checked against the source.
CHECKED_HASH = 0b11


def pyc_flags(path: Path) -> int:
    with path.open("rb") as f:
        return int.from_bytes(f.read(8)[4:8], "little")


@pytest.mark.parametrize("slim", [False, True], ids=["full", "slim"])
@pytest.mark.parametrize("runtime", declared_runtimes())
def test_each_layer_carries_its_own_runtimes_bytecode_only(
    build_dir: Path, runtime: str, slim: bool
) -> None:
    # GIVEN a runtime's built layer
    layer = layer_dir(build_dir, runtime, slim=slim)

    # WHEN its bytecode is listed
    tags = {pyc.name.split(".")[-2] for pyc in layer.rglob("*.pyc")}
    sources = sorted(layer.joinpath("fleetbreaker").rglob("*.py"))
    missing = [
        str(source.relative_to(layer))
        for source in sources
        if not (source.parent / "__pycache__" / f"{source.stem}.{cache_tag(runtime)}.pyc").is_file()
    ]

    # THEN it is that runtime's alone, checked against the source, and where this machine has
    # the runtime's interpreter every package module has it (elsewhere there is none at all)
    assert len(sources) >= 20
    if find_interpreter(runtime):
        assert tags == {cache_tag(runtime)}
        assert missing == []
    else:
        assert tags == set()
    assert {pyc_flags(pyc) for pyc in layer.rglob("*.pyc")} <= {CHECKED_HASH}


def source_only() -> list[str]:
    """layer/Makefile's SOURCE_ONLY: the paths the full layers leave without bytecode."""
    makefile = (REPO_ROOT / "layer" / "Makefile").read_text()
    match = re.search(r"^SOURCE_ONLY := ((?:.*\\\n)*.*)$", makefile, re.MULTILINE)
    assert match is not None
    return match.group(1).replace("\\\n", " ").split()


def test_what_no_cold_start_imports_is_left_as_source(build_dir: Path, runtime_boto3: Path) -> None:
    # GIVEN the full layer of the runtime the build runs on, and the paths left as source
    layer = layer_dir(build_dir, BUILD_RUNTIME)
    paths = source_only()
    assert paths

    # WHEN redis, every fleetbreaker module and a Redis store are imported from it (and boto3)
    answer = isolated(sys.executable, IMPORTED_FILES, json.dumps([str(layer), str(runtime_boto3)]))

    # THEN each path is in the layer, without bytecode, and none of it was imported
    for path in paths:
        assert (layer / path).is_dir(), path
        assert not list((layer / path).rglob("*.pyc")), path
        assert not [f for f in answer["files"] if f.startswith(path + "/")], path


# Imports what a function on the layer imports (redis through the Redis store), and lists the
# layer's files it loaded (relative).
IMPORTED_FILES = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    root = json.loads(sys.argv[1])[0]
    sys.path[:0] = json.loads(sys.argv[1])
    import fleetbreaker, redis
    from fleetbreaker import RedisStore
    for module in pkgutil.walk_packages(fleetbreaker.__path__, "fleetbreaker."):
        try:
            importlib.import_module(module.name)
        except ImportError:
            pass  # modules needing what neither the layer nor boto3 brings
    RedisStore(url="redis://127.0.0.1:1")
    files = sorted(
        m.__file__[len(root) + 1:] for m in list(sys.modules.values())
        if getattr(m, "__file__", None) and m.__file__.startswith(root)
    )
    print(json.dumps({"files": files}))
    """
)


# Targets every layer of the template must meet, unzipped (what a function's 250 MB counts).
FULL_LAYER_LIMIT = 15e6
# The slim layer's target: the package alone (redis, 2.6 MB of source and 2.4-2.6 MB of one
# runtime's bytecode, needs the full layer).
SLIM_LAYER_LIMIT = 3e6


@pytest.mark.parametrize("runtime", declared_runtimes())
def test_every_layer_stays_within_its_size(build_dir: Path, runtime: str) -> None:
    # GIVEN a runtime's built layers WHEN their files are added up (unzipped), and zipped
    # (pathlib and zipfile, none of the measured code: with coverage's tracer off)
    full = untraced(tree_size)(layer_dir(build_dir, runtime))
    slim = untraced(tree_size)(layer_dir(build_dir, runtime, slim=True))
    zipped = [
        untraced(zipped_size)(layer_dir(build_dir, runtime, slim=s).parent) for s in (False, True)
    ]
    print(
        f"\n{runtime}: full layer {full / 1e6:.2f} MB unzipped, {zipped[0] / 1e6:.2f} MB zipped;"
        f" slim {slim / 1e6:.2f} MB, {zipped[1] / 1e6:.2f} MB"
    )
    # THEN each is within its limit
    assert full <= FULL_LAYER_LIMIT
    assert slim <= SLIM_LAYER_LIMIT


def test_the_layer_build_has_a_target_for_each_of_the_templates_layers() -> None:
    # GIVEN every layer of the template WHEN make shows what its target would run
    template = load_template()
    layers = {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::LayerVersion"
    }
    assert len(layers) == 2 * len(declared_runtimes())
    for name, layer in layers.items():
        result = subprocess.run(
            ["make", "-n", f"build-{name}", "ARTIFACTS_DIR=/nonexistent"],
            cwd=REPO_ROOT / "layer",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        # THEN it compiles for its one runtime; a full layer installs requirements.txt, a slim
        # one installs nothing
        assert result.returncode == 0, result.stderr
        [runtime] = layer["Properties"]["CompatibleRuntimes"]
        [compile_line] = [line for line in result.stdout.splitlines() if "compile_bytecode" in line]
        assert compile_line.split()[-1] == runtime.removeprefix("python"), name
        if "Slim" in name:
            assert "pip" not in result.stdout, name
        else:
            assert "pip install" in result.stdout, name
            assert "-r requirements.txt" in result.stdout, name


def test_every_function_build_compiles_for_exactly_the_runtimes_the_template_allows() -> None:
    # GIVEN the template's Runtime parameter, and the include every function's Makefile uses
    include = (REPO_ROOT / "functions" / "shared" / "bytecode.mk").read_text()
    versions = re.search(r"^BYTECODE_VERSIONS \?= (.+)$", include, re.MULTILINE)
    assert versions is not None
    allowed = load_template()["Parameters"]["Runtime"]["AllowedValues"]

    # THEN the functions' bytecode covers exactly those runtimes, and every build writes it
    assert [f"python{v}" for v in versions.group(1).split()] == allowed
    for makefile in sorted((REPO_ROOT / "functions").glob("*/Makefile")):
        text = makefile.read_text()
        assert "include $(SHARED)/bytecode.mk" in text, makefile
        assert "\t$(COMPILE_BYTECODE)" in text, makefile


def test_function_holds_its_code_and_requests(build_dir: Path) -> None:
    function = build_dir / "PaymentFunction"
    assert (function / "app.py").is_file()
    assert (function / "requests" / "__init__.py").is_file()
    assert not (function / "fleetbreaker").exists(), "the layer provides it"
    assert not (function / "boto3").exists(), "the runtime provides it"
    assert not [str(p) for p in function.rglob("*.so")]


@pytest.mark.parametrize(
    "function", ["PaymentFunction", "ChargeFunction", "DeferredPaymentsFunction"]
)
def test_every_payment_function_carries_the_one_shared_payment_module(
    build_dir: Path, function: str
) -> None:
    # GIVEN the built functions, WHEN their payment module is compared with the source,
    # THEN each carries functions/shared/payments.py unchanged, beside its app.py
    built = build_dir / function / "payments.py"
    assert built.is_file(), f"{function} was built without payments.py"
    assert built.read_bytes() == (REPO_ROOT / "functions" / "shared" / "payments.py").read_bytes()
    assert (build_dir / function / "app.py").is_file()


@pytest.mark.parametrize("function", ["PaymentFunction", "DeferredPaymentsFunction"])
def test_the_api_and_the_consumer_carry_the_one_charging_module(
    build_dir: Path, function: str
) -> None:
    # GIVEN the API and the deferred-payments consumer, built
    built = build_dir / function
    # THEN both charge with functions/shared/charging.py unchanged, and requests beside it
    assert (built / "charging.py").read_bytes() == (
        REPO_ROOT / "functions" / "shared" / "charging.py"
    ).read_bytes()
    assert (built / "requests" / "__init__.py").is_file()
    assert not (built / "fleetbreaker").exists(), "the layer provides it"


@pytest.mark.parametrize(
    "function", ["PaymentFunction", "DeferredPaymentsFunction", "BreakerEventsFunction"]
)
def test_every_function_that_pauses_consumers_carries_the_one_breaker_events_module(
    build_dir: Path, function: str
) -> None:
    # GIVEN the built functions that may toggle the consumer's mapping (the events function;
    # the API and the consumer with the Redis store), THEN each has the shared module as is
    built = build_dir / function / "breaker_events.py"
    source = REPO_ROOT / "functions" / "shared" / "breaker_events.py"
    assert built.read_bytes() == source.read_bytes()


CHARGE_VALIDATES = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = json.loads(sys.argv[1])
    import app, payments
    assert payments.__file__.startswith(sys.path[0]), payments.__file__
    try:
        app.parse_payment({"amount": 0, "currency": "EUR", "idempotency_key": "k"})
    except app.InvalidPaymentRequest as exc:
        print(json.dumps({"error": str(exc)}))
    """
)


def test_built_charge_function_validates_with_the_shared_module(
    build_dir: Path, runtime_boto3: Path
) -> None:
    # GIVEN the built charge function and layer alone, in Lambda's order
    paths = [
        str(build_dir / "ChargeFunction"),
        str(layer_dir(build_dir, BUILD_RUNTIME)),
        str(runtime_boto3),
    ]
    # WHEN it validates a payment whose amount is out of range
    answer = isolated(sys.executable, CHARGE_VALIDATES, json.dumps(paths))
    # THEN the shared module, imported from the artifact, words the error
    assert answer == {"error": "amount: must be between 1 and 100000000"}


# What the full layer and AWS's Powertools layer both bring (beside redis, the full layer's).
POWERTOOLS_MODULES = (
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.metrics",
    "aws_xray_sdk.core",
)

# Run inside each interpreter with only the built artifacts and boto3 on sys.path; argv[2]
# lists the dependencies to import besides every fleetbreaker module.
IMPORT_EVERYTHING = textwrap.dedent(
    """
    import builtins, importlib, json, pkgutil, sys
    sys.path[:0] = json.loads(sys.argv[1])
    compiled = []  # the layer's sources this interpreter had to compile (no bytecode for it)
    compile_source = builtins.compile
    def spy(source, filename, *args, **kwargs):
        if str(filename).startswith(sys.path[0]):
            compiled.append(str(filename)[len(sys.path[0]):])
        return compile_source(source, filename, *args, **kwargs)
    builtins.compile = spy
    import fleetbreaker
    modules = [m.name for m in pkgutil.walk_packages(fleetbreaker.__path__, "fleetbreaker.")]
    missing = {}  # module -> the package it needed and did not find
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing[name] = exc.name
    for name in json.loads(sys.argv[2]):  # the dependencies the layers should bring
        importlib.import_module(name)
    from aws_lambda_powertools import Logger, Tracer
    from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore, MemoryStore
    from fleetbreaker.observability import default_listeners
    DynamoDBStore("CircuitBreakers")
    breaker = CircuitBreaker("import-check", store=MemoryStore(),
                             config=BreakerConfig(failure_threshold=1),
                             listeners=default_listeners(Logger()))
    assert breaker.call(lambda: "ok") == "ok"
    assert fleetbreaker.__file__.startswith(sys.path[0])
    print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "modules": len(modules),
                      "missing": missing, "compiled": compiled}))
    """
)

INVOKE_FUNCTION = textwrap.dedent(
    """
    import builtins, json, sys
    sys.path[:0] = json.loads(sys.argv[1])
    built = tuple(sys.path[:2])  # the function's code, then the layer
    compiled = []  # the built sources this interpreter had to compile (no bytecode for it)
    compile_source = builtins.compile
    def spy(source, filename, *args, **kwargs):
        if str(filename).startswith(built):
            compiled.append(str(filename))
        return compile_source(source, filename, *args, **kwargs)
    builtins.compile = spy
    import app
    from types import SimpleNamespace
    context = SimpleNamespace(function_name="payment", memory_limit_in_mb=256,
                              invoked_function_arn="arn:aws:lambda:us-east-1:1:function:p",
                              aws_request_id="req-1")
    answers = {}
    for path in sys.argv[2:]:
        with open(path) as f:
            response = app.lambda_handler(json.load(f), context)
        answers[path.rsplit("/", 1)[-1]] = response["statusCode"]
    print(json.dumps({"answers": answers, "compiled": compiled}))
    """
)


def isolated(python: str, script: str, *args: str, env: dict[str, str] | None = None) -> Any:
    # -I: no user site, no PYTHON* variables, no script dir; -S: not even the interpreter's
    # own site-packages. sys.path is then the standard library plus what the script adds.
    # -B: no bytecode written, as under Lambda's read-only /opt and /var/task.
    result = subprocess.run(
        [python, "-I", "-S", "-B", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("runtime", runtimes_here())
def test_built_layer_imports_on_declared_runtime(
    runtime: str, build_dir: Path, runtime_boto3: Path
) -> None:
    # GIVEN an interpreter for a runtime the layer declares compatible
    python = find_interpreter(runtime)
    if python is None:
        backend_unavailable(f"no {runtime} interpreter on this machine, but the layer declares it")

    # WHEN the runtime's built layer is imported with only boto3 beside it
    layer = layer_dir(build_dir, runtime)
    answer = isolated(
        python,
        IMPORT_EVERYTHING,
        json.dumps([str(layer), str(runtime_boto3)]),
        json.dumps([*POWERTOOLS_MODULES, "redis"]),
    )

    # THEN every fleetbreaker module and bundled dependency imports, and a breaker works,
    # from the layer's own bytecode: nothing it imported was compiled from source
    assert answer["python"] == runtime.removeprefix("python")
    assert answer["modules"] >= 10
    assert answer["missing"] == {}
    assert answer["compiled"] == []


@pytest.mark.parametrize("runtime", runtimes_here())
def test_built_function_answers_on_declared_runtime(
    runtime: str,
    build_dir: Path,
    runtime_boto3: Path,
    moto_server: str,
) -> None:
    # GIVEN an interpreter for the runtime, the built function and layer in Lambda's order,
    # a table on moto and a healthy provider
    python = find_interpreter(runtime)
    if python is None:
        backend_unavailable(f"no {runtime} interpreter on this machine, but the template allows it")
    paths = [
        str(build_dir / "PaymentFunction"),
        str(layer_dir(build_dir, runtime)),
        str(runtime_boto3),
    ]
    events = [str(EVENTS / "payment-ok.json"), str(EVENTS / "payment-bad-body.json")]
    with FakePaymentApi("ok") as api:
        env = {
            "CIRCUIT_BREAKER_TABLE": make_table(moto_server),
            "PAYMENT_API_URL": api.url,
            "AWS_ENDPOINT_URL_DYNAMODB": moto_server,
            "POWERTOOLS_SERVICE_NAME": "payment",
        }

        # WHEN sample events are invoked through the built lambda_handler
        result = isolated(python, INVOKE_FUNCTION, json.dumps(paths), *events, env=env)

    # THEN the payment is charged through the provider and the bad body is a 400, from the
    # build's bytecode: neither the handler, its dependencies nor the layer was compiled
    assert result["answers"] == {"payment-ok.json": 200, "payment-bad-body.json": 400}
    assert api.calls == 1
    assert result["compiled"] == []


# --------------------------------------------------------------------------- the slim layer


@pytest.mark.parametrize("runtime", declared_runtimes())
def test_slim_layer_holds_the_package_alone(build_dir: Path, runtime: str) -> None:
    # GIVEN a built slim layer WHEN its top-level entries are listed THEN it is the package
    # and nothing else: no redis, nothing AWS's Powertools layer or the runtime brings
    layer = layer_dir(build_dir, runtime, slim=True)
    assert (layer / "fleetbreaker" / "__init__.py").is_file()
    assert sorted(path.name for path in layer.iterdir()) == ["fleetbreaker"]
    assert not [str(p) for p in layer.rglob("*") if re.search(r"\.(so|pyd|dylib)$", p.name)]


@pytest.fixture(scope="module")
def powertools_layer(build_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for AWS's Powertools layer: Powertools and the X-Ray SDK, at the pins the
    full layer bundles (the full layer's content without fleetbreaker and redis)."""
    target = tmp_path_factory.mktemp("powertools") / "python"
    full = layer_dir(build_dir, BUILD_RUNTIME)
    shutil.copytree(
        full, target, ignore=shutil.ignore_patterns("fleetbreaker", "redis", "redis-*.dist-info")
    )
    assert (target / "aws_lambda_powertools").is_dir()
    assert not (target / "redis").exists()
    return target


@pytest.mark.parametrize("runtime", runtimes_here())
def test_slim_layer_beside_powertools_imports_on_declared_runtime(
    runtime: str, build_dir: Path, runtime_boto3: Path, powertools_layer: Path
) -> None:
    # GIVEN an interpreter for a declared runtime, the slim layer and a Powertools layer
    python = find_interpreter(runtime)
    if python is None:
        backend_unavailable(f"no {runtime} interpreter on this machine, but the layer declares it")
    slim = layer_dir(build_dir, runtime, slim=True)

    # WHEN everything is imported with the slim layer first, as /opt/python merges them
    paths = [str(slim), str(powertools_layer), str(runtime_boto3)]
    answer = isolated(
        python, IMPORT_EVERYTHING, json.dumps(paths), json.dumps(list(POWERTOOLS_MODULES))
    )

    # THEN every fleetbreaker module imports, with observability from the other layer, but
    # the ElastiCache IAM signer, built on redis (the store checks for redis before it)
    assert answer["python"] == runtime.removeprefix("python")
    assert answer["modules"] >= 10
    assert answer["missing"] == {"fleetbreaker.stores.elasticache_iam": "redis"}


# A function on the slim layer alone: a breaker on the table its environment names, used by
# two containers, and the Redis store asked for both ways (argument and environment).
SLIM_ALONE = textwrap.dedent(
    """
    import json, os, sys
    sys.path[:0] = json.loads(sys.argv[1])
    from fleetbreaker import BreakerConfig, CircuitBreaker, ConfigError, RedisStore
    config = BreakerConfig(failure_threshold=1, cache_ttl=0)
    first = CircuitBreaker("slim-check", config=config, container_id="first")
    assert first.call(lambda: "ok") == "ok"
    try:
        first.call(lambda: 1 / 0)
    except ZeroDivisionError:
        pass
    second = CircuitBreaker("slim-check", config=config, container_id="second")
    errors = {}
    try:
        RedisStore(url="redis://127.0.0.1:1")
    except ConfigError as exc:
        errors["argument"] = str(exc)
    os.environ["CIRCUIT_BREAKER_REDIS_URL"] = "rediss://cache.example.com:6379"
    try:
        CircuitBreaker("slim-redis", config=config)
    except ConfigError as exc:
        errors["environment"] = str(exc)
    print(json.dumps({
        "store": type(first.store).__name__, "seen_by_another_container": second.state,
        "store_errors": first.stats.store_errors + first.stats.degradations, "redis": errors,
        "powertools": "aws_lambda_powertools" in sys.modules,
        "redis_imported": "redis" in sys.modules,
    }))
    """
)


@pytest.fixture(scope="module")
def slim_alone(build_dir: Path, runtime_boto3: Path, moto_server: str) -> Any:
    """SLIM_ALONE's answer: the slim layer and boto3 alone, its table on moto's server."""
    slim = layer_dir(build_dir, BUILD_RUNTIME, slim=True)
    env = {
        "CIRCUIT_BREAKER_TABLE": make_table(moto_server),
        "AWS_ENDPOINT_URL_DYNAMODB": moto_server,
    }
    return isolated(
        sys.executable, SLIM_ALONE, json.dumps([str(slim), str(runtime_boto3)]), env=env
    )


def test_slim_layer_alone_runs_a_fleet_breaker_on_dynamodb(slim_alone: Any) -> None:
    # GIVEN the slim layer with no Powertools and no redis anywhere, and a table
    # WHEN one container's breaker trips on a failure
    # THEN the trip is in the table (another container sees it open), with no store error,
    # and neither Powertools nor redis was needed
    assert slim_alone["store"] == "DynamoDBStore"
    assert slim_alone["seen_by_another_container"] == "open"
    assert slim_alone["store_errors"] == 0
    assert slim_alone["powertools"] is False
    assert slim_alone["redis_imported"] is False


def test_slim_layer_refuses_a_redis_store_naming_the_full_layer(slim_alone: Any) -> None:
    # GIVEN the slim layer alone WHEN a RedisStore is built, from a URL or from the environment
    errors = slim_alone["redis"]
    # THEN each is a ConfigError saying to attach the full layer or bundle redis; the one from
    # the environment names the variable that chose Redis
    assert errors["argument"].startswith("RedisStore needs redis-py, which the slim")
    assert errors["environment"].startswith(
        "CIRCUIT_BREAKER_REDIS_URL selects the Redis store, but RedisStore needs redis-py"
    )
    for message in errors.values():
        assert "attach the full layer (/<stack>/fleetbreaker/<runtime>/layer-arn)" in message
        assert "from a clone of fleetbreaker: pip install '.[redis]'" in message


# A function that bundles redis itself, on the slim layer: a breaker on the Redis store its
# environment names, used by two containers.
SLIM_WITH_BUNDLED_REDIS = textwrap.dedent(
    """
    import json, sys, uuid
    sys.path[:0] = json.loads(sys.argv[1])
    from fleetbreaker import BreakerConfig, CircuitBreaker
    config = BreakerConfig(failure_threshold=1, cache_ttl=0)
    name = f"slim-redis-{uuid.uuid4().hex}"
    first = CircuitBreaker(name, config=config, container_id="first")
    try:
        first.call(lambda: 1 / 0)
    except ZeroDivisionError:
        pass
    second = CircuitBreaker(name, config=config, container_id="second")
    import redis
    print(json.dumps({
        "store": type(first.store).__name__, "seen_by_another_container": second.state,
        "store_errors": first.stats.store_errors + first.stats.degradations,
        "redis_from": redis.__file__,
    }))
    """
)


def test_slim_layer_with_redis_bundled_in_the_function_runs_a_redis_breaker(
    build_dir: Path, runtime_boto3: Path, redis_server: str, tmp_path: Path
) -> None:
    # GIVEN a function that bundles the redis the full layer pins, on the slim layer
    function = tmp_path / "function"
    full = layer_dir(build_dir, BUILD_RUNTIME)
    shutil.copytree(full / "redis", function / "redis")
    slim = layer_dir(build_dir, BUILD_RUNTIME, slim=True)
    paths = [str(function), str(slim), str(runtime_boto3)]

    # WHEN its environment names a Redis server and one container's breaker trips
    answer = isolated(
        sys.executable,
        SLIM_WITH_BUNDLED_REDIS,
        json.dumps(paths),
        env={"CIRCUIT_BREAKER_REDIS_URL": redis_server},
    )

    # THEN the trip is in Redis (another container sees it open), with the function's redis
    assert answer["store"] == "RedisStore"
    assert answer["seen_by_another_container"] == "open"
    assert answer["store_errors"] == 0
    assert answer["redis_from"].startswith(str(function))
