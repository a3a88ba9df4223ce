"""The package as a user outside the repository gets it: from a clone (`pip install .`, with
the extras the error messages name) or as the wheel `make dist` builds, in a fresh virtual
environment; no package index carries it, and no page or message says one does.

The wheel test, in steps (about a minute and a half on the 2-core machine, most of it pip):
build the sdist and the wheel (from the sdist, as `python -m build` does) out of a copy of what
the sdist needs; check both hold the package with its Lua scripts and type marker; install the
wheel with its dependency into a new venv (pins from constraints.txt; no repository on any
path); then, from a directory outside the repository, the installed `fleetbreaker` command
creates the table on a moto server of its own, the README's "Use it" example runs as written
(with a stand-in for the reader's `myapp.payments`), and after the dependency fails the
installed command shows the breaker open.

The clone test installs the copy as the README says (`pip install .` in its root), then for
each optional part: the package's own error names the extra to install, that exact command
is run, and the part then works. pip reads packages from the machine's own pip configuration
(an index mirror or wheel directory where there is one); nothing else of the environment
reaches it but PIP_COMPILE=false, which keeps it from writing bytecode (clean_env).
"""

from __future__ import annotations

import ensurepip
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib

from devtools.servers import REPO_ROOT, MotoServer

STEP_TIMEOUT_S = 600
# What `python -m build` needs from the repository (pyproject.toml's readme and license too).
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "layer/fleetbreaker"]
PACKAGED = {
    "fleetbreaker/__init__.py",
    "fleetbreaker/py.typed",
    "fleetbreaker/cli/__init__.py",
    "fleetbreaker/stores/dynamodb/store.py",
    "fleetbreaker/stores/redis_common.lua",
    "fleetbreaker/stores/redis_report.lua",
}

# The reader's payment client the README imports ("yours"): charges, until told it is down.
PAYMENTS = """
down = False


def charge(order):
    if down:
        raise ConnectionError("payment provider unreachable")
    return {"charged": order["amount"], "currency": order["currency"]}
"""

# After the README's example ran in this module. Its breaker keeps the store's short client
# timeouts (0.3 s reads) and 1 s deadline, which moto's server can miss on a busy machine (the
# breaker then goes on locally): a second breaker on the same name, patient with the store,
# fails until the fleet's record is open.
AFTERWARDS = """
from botocore.config import Config

import fleetbreaker
import myapp.payments

assert fleetbreaker.__file__.startswith(sys.argv[1]), fleetbreaker.__file__
assert breaker.state.value == "closed"
patient = CircuitBreaker(
    "payment-api",
    store=DynamoDBStore(
        table_name="CircuitBreakers",
        boto_config=Config(connect_timeout=10, read_timeout=10, retries={"max_attempts": 0}),
    ),
    config=BreakerConfig(failure_threshold=5, store_deadline_seconds=30),
)
myapp.payments.down = True
for _ in range(5):
    try:
        patient.call(myapp.payments.charge, {"amount": 1250, "currency": "EUR"})
    except ConnectionError:
        pass
assert patient.stats.degradations == 0, patient.stats
assert patient.state.value == "open", patient.state
print("example ran; breaker open")
"""


def clean_env(home: Path) -> dict[str, str]:
    """No variable of this shell (no PIP_*, no PYTHONPATH): pip's own configuration files only,
    and PIP_COMPILE=false. pip then writes no bytecode for what it installs (`--no-compile`),
    in the venv and in each build's isolated environment, where it compiled all of setuptools
    at every install: the interpreter compiles what it imports instead, and keeps it. What is
    installed, and from where, is the same."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "PIP_COMPILE": "false"}


def fresh_venv(venv: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """The venv `python -m venv` makes, with the pip (and, before Python 3.12, setuptools) it
    installs from the wheels Python bundles: its python and its pip.

    venv installs them by running pip from inside its wheel, where no module of pip has
    bytecode, and compiles both: 2.3 s of CPU a venv. The suite's pip installs the same
    wheels the same way (by name, from the bundled directory alone) into a venv made without
    pip, in under a third of that. Where Python keeps no bundled wheels (Debian's python3
    keeps them elsewhere), venv installs them itself."""
    bundled = Path(ensurepip.__file__).parent / "_bundled"
    names = sorted(wheel.name.split("-")[0] for wheel in bundled.glob("*.whl"))
    if names:
        run([sys.executable, "-m", "venv", "--without-pip", venv], venv.parent, env)
        install = ["install", "--quiet", "--no-index", "--find-links", bundled, *names]
        run(
            [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", *install],
            venv.parent,
            env,
        )
    else:
        run([sys.executable, "-m", "venv", venv], venv.parent, env)
    return venv / "bin" / "python", venv / "bin" / "pip"


def copy_sources(source: Path) -> Path:
    """What a clone holds for the package (and an sdist too), copied away from the repository."""
    for item in SOURCES:
        if (REPO_ROOT / item).is_dir():
            shutil.copytree(
                REPO_ROOT / item, source / item, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            (source / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / item, source / item)
    return source


def attempt(command: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    """Run a command that may fail: its output and errors together, the exit code first."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def run(command: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def readme_example() -> str:
    """The first Python block under the README's "Use it" heading."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("\n### Use it\n", 1)[1]
    match = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.slow
def test_the_wheel_installs_outside_the_repository_and_runs_the_readme_example(
    tmp_path: Path,
) -> None:
    clean = clean_env(tmp_path)
    # GIVEN the sources an sdist holds, copied away from the repository
    source = copy_sources(tmp_path / "source")
    # WHEN `python -m build` runs (the wheel is built from the sdist)
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", dist, source], tmp_path, clean)
    # THEN it made the two files docs/deploying.md names, each holding the whole package
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    install_docs = (REPO_ROOT / "docs" / "deploying.md").read_text()
    assert f"dist/{wheel.name}" in install_docs
    assert wheel.name.removesuffix("-py3-none-any.whl") == sdist.name.removesuffix(".tar.gz")
    assert set(zipfile.ZipFile(wheel).namelist()) >= PACKAGED
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/layer/", 1)[-1] for name in archive.getnames()}
    assert in_sdist >= PACKAGED

    # WHEN the wheel is installed into a fresh venv, with its dependency pinned as tested
    venv = tmp_path / "venv"
    python, pip = fresh_venv(venv, clean)
    run(
        [pip, "install", "--quiet", "-c", REPO_ROOT / "constraints.txt", wheel],
        tmp_path,
        clean,
    )
    site = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path, clean
    ).strip()

    # THEN, from a directory outside the repository, against a DynamoDB of its own:
    work = tmp_path / "app"
    (work / "myapp").mkdir(parents=True)
    (work / "myapp" / "__init__.py").write_text("")
    (work / "myapp" / "payments.py").write_text(PAYMENTS)
    with MotoServer() as moto:
        env = {
            **clean,
            "AWS_ENDPOINT_URL_DYNAMODB": moto.endpoint_url,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "PYTHONPATH": str(work),  # the reader's own code, nothing of the repository
        }
        # the installed command makes the README's table
        made = run([venv / "bin" / "fleetbreaker", "create-table", "CircuitBreakers"], work, env)
        assert made.startswith("created table 'CircuitBreakers'")
        # the README's example runs as written, then its dependency fails
        (work / "handler.py").write_text("import sys\n" + readme_example() + AFTERWARDS)
        assert run([python, "handler.py", site], work, env) == "example ran; breaker open\n"
        # and the installed command sees the breaker the example opened
        status = run(
            [venv / "bin" / "fleetbreaker", "--table", "CircuitBreakers", "status", "payment-api"],
            work,
            env,
        )
    assert re.search(r"^state\s+open$", status, re.M), status


# Each optional part of the package, tried in a venv that lacks it: the code that needs it,
# then the module the extra brings. The part's own error names the extra (its install line).
PARTS = {
    "redis": "from fleetbreaker import RedisStore\nRedisStore(url='redis://127.0.0.1:1/0')\n",
    "otel": "from fleetbreaker.tracing import OpenTelemetryListener\nOpenTelemetryListener()\n",
    "observability": "from fleetbreaker.metrics import MetricsListener\nMetricsListener()\n",
}
BROUGHT = {
    "redis": "import redis",
    "otel": "import opentelemetry.trace",
    "xray": "import aws_xray_sdk.core",
    "observability": "import aws_lambda_powertools.metrics, aws_xray_sdk.core",
}
# The install line an error message gives, as a reader would copy it.
INSTALL_LINE = re.compile(r"from a clone of fleetbreaker[:,] (pip install '(\.\[[a-z]+\])')")


@pytest.mark.slow
def test_a_clone_installs_with_pip_and_each_extra_brings_what_its_message_names(
    tmp_path: Path,
) -> None:
    clean = clean_env(tmp_path)
    # GIVEN a clone's copy of the package and a fresh venv with nothing in it
    clone = copy_sources(tmp_path / "clone")
    venv = tmp_path / "venv"
    python, pip = fresh_venv(venv, clean)
    pins = ["-c", REPO_ROOT / "constraints.txt"]
    elsewhere = tmp_path / "elsewhere"  # not the clone: the installed package is imported
    elsewhere.mkdir()

    # WHEN `pip install .` runs in the clone's root, as the README says
    run([pip, "install", "--quiet", *pins, "."], clone, clean)

    # THEN the package and its command are installed, boto3 with it and no extra
    assert "fleetbreaker" in run([venv / "bin" / "fleetbreaker", "--help"], elsewhere, clean)
    run([python, "-c", "import boto3, fleetbreaker"], elsewhere, clean)
    for extra, brought in BROUGHT.items():
        assert "ModuleNotFoundError" in attempt([python, "-c", brought], elsewhere, clean), extra

    # AND each part that needs an extra says which, and that very line installs it
    for extra, code in PARTS.items():
        refused = attempt([python, "-c", code], elsewhere, clean)
        assert refused.startswith("exit 1"), refused
        assert "ConfigError" in refused, refused
        line = INSTALL_LINE.search(refused)
        assert line is not None, refused
        assert line.group(2) == f".[{extra}]", refused
        run([pip, "install", "--quiet", *pins, line.group(2)], clone, clean)
        run([python, "-c", f"{BROUGHT[extra]}\n{code}"], elsewhere, clean)

    # AND the X-Ray extra (no message: tracing imports the SDK only when a trace is active)
    run([pip, "install", "--quiet", *pins, ".[xray]"], clone, clean)
    run([python, "-c", BROUGHT["xray"]], elsewhere, clean)


def test_every_extra_a_message_or_page_names_is_one_pyproject_defines() -> None:
    # GIVEN the extras pyproject.toml defines (dev tools and mutmut are the repo's own)
    defined = set(
        tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]
    )
    # WHEN the install lines of the package's messages and of the pages are read
    named = {
        extra
        for path in [*PACKAGE_FILES, *PAGES]
        for group in re.findall(r"pip install '\.\[([a-z,]+)\]'", path.read_text())
        for extra in group.split(",")
    }
    # THEN each names a defined extra, and the user-facing ones are all named somewhere
    assert named <= defined, named - defined
    assert {"redis", "otel", "xray", "observability"} <= named


PAGES = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    REPO_ROOT / "bench" / "README.md",
    REPO_ROOT / "CHANGELOG.md",
]
PACKAGE_FILES = sorted((REPO_ROOT / "layer" / "fleetbreaker").rglob("*.py"))
# An install from a package index (`pip install fleetbreaker`, `'fleetbreaker[redis]'`), a git
# URL nobody publishes, or the layer directory, which is no project of its own.
NOT_AN_INSTALL = re.compile(
    r"pip install\s+(?:-\S+\s+)*['\"]?(?:fleetbreaker\b|[^\s'\"]*git\+|\./layer\b|layer/?\s)"
)


@pytest.mark.parametrize(
    "path",
    [*PAGES, *PACKAGE_FILES, *sorted((REPO_ROOT / "functions").rglob("*.py"))],
    ids=lambda path: str(path.relative_to(REPO_ROOT)),
)
def test_no_page_or_message_promises_an_install_that_does_not_exist(path: Path) -> None:
    # GIVEN a page, or a module of the package whose messages a user reads
    # THEN it never tells them to install fleetbreaker from an index, a git URL or ./layer
    assert NOT_AN_INSTALL.findall(path.read_text()) == []


def test_the_check_catches_each_install_that_does_not_exist() -> None:
    # GIVEN the lines the issue found in the pages and messages, and the ones that are right
    wrong = [
        "pip install fleetbreaker",
        "(`pip install 'fleetbreaker[redis]'`)",
        'pip install "fleetbreaker[redis] @ git+https://github.com/x/y@main"',
        "pip install --quiet fleetbreaker",
        "pip install ./layer",
    ]
    right = ["pip install .", "pip install '.[redis]'", "pip install dist/fleetbreaker-0.1.0.whl"]
    # THEN the check finds every wrong one and none of the right ones
    assert [line for line in wrong if not NOT_AN_INSTALL.search(line)] == []
    assert [line for line in right if NOT_AN_INSTALL.search(line)] == []
