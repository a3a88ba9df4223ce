"""What `make demo` installs: the venv, and redis-server only for `--store redis`.

`make -n -B` prints every recipe a target would run with all of its prerequisites out of date,
as on a fresh clone, and runs none of them.
"""

from __future__ import annotations

import subprocess

import pytest

from devtools.servers import REPO_ROOT

# What each install prints in its recipe.
VENV = "pip install --quiet -c constraints.txt -e '.[dev]'"
CHECKOV = "pip install --quiet -c constraints-tools.txt checkov"
DYNALITE = "npm ci"
REDIS = "apt-get install"


def fresh_clone_recipes(*args: str) -> str:
    done = subprocess.run(
        ["make", "-n", "-B", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_installs_the_venv_and_nothing_else() -> None:
    recipes = fresh_clone_recipes("demo")
    assert VENV in recipes
    assert "-m bench.demo" in recipes
    for other in (CHECKOV, DYNALITE, REDIS):
        assert other not in recipes, other


@pytest.mark.parametrize("args", ["--store redis", "--short --store=redis"])
def test_the_redis_store_option_also_installs_redis_server(args: str) -> None:
    recipes = fresh_clone_recipes("demo", f"ARGS={args}")
    assert REDIS in recipes
    assert CHECKOV not in recipes


def test_make_test_still_installs_everything_the_tests_use() -> None:
    # tests/sam runs checkov from .venv-tools, the contract suite dynalite and redis-server.
    recipes = fresh_clone_recipes("test")
    for needed in (VENV, CHECKOV, DYNALITE, REDIS):
        assert needed in recipes, needed
