"""The package as a user outside the repository gets it: `python -m build`, then the wheel in a
fresh virtual environment, the README's example run there.

One test, in steps (about a minute and a half on the 2-core machine, most of it pip): build
the sdist and the wheel (from the sdist, as `python -m build` does) out of a copy of what the
sdist needs; check both hold the package with its Lua scripts and type marker; install the
wheel with its dependency into a new venv (pins from constraints.txt; no repository on any
path); then, from a directory outside the repository, the installed `fleetbreaker` command
creates the table on a moto server of its own, the README's "Use it" example runs as written
(with a stand-in for the reader's `myapp.payments`), and after the dependency fails the
installed command shows the breaker open.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from devtools.servers import REPO_ROOT, MotoServer

pytestmark = pytest.mark.slow

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


def test_the_wheel_installs_outside_the_repository_and_runs_the_readme_example(
    tmp_path: Path,
) -> None:
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    # GIVEN the sources an sdist holds, copied away from the repository
    source = tmp_path / "source"
    for item in SOURCES:
        if (REPO_ROOT / item).is_dir():
            shutil.copytree(
                REPO_ROOT / item, source / item, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            (source / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / item, source / item)
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
    run([sys.executable, "-m", "venv", venv], tmp_path, clean)
    python, pip = venv / "bin" / "python", venv / "bin" / "pip"
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
