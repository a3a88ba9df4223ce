"""One configuration path: the store variables and BREAKER_* are read in one place each.

``fleetbreaker.stores.variables`` reads ``CIRCUIT_BREAKER_TABLE``, ``_REDIS_URL``,
``_REDIS_IAM_USER`` and ``_REDIS_IAM_CACHE``; ``BreakerConfig.from_env`` reads
``BREAKER_*``. A breaker built without ``config=`` takes the environment's BREAKER_* as it
takes its store; an explicit argument wins over the environment, which wins over the
documented defaults.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from devtools.servers import REPO_ROOT
from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, DynamoDBStore, MemoryStore
from fleetbreaker.config import ENV_FIELDS, env_variable
from fleetbreaker.stores import STORE_VARIABLES

# The two readers, and the list of every known name (it names them, reads none).
READERS = {
    REPO_ROOT / "layer" / "fleetbreaker" / "stores" / "variables.py",
    REPO_ROOT / "layer" / "fleetbreaker" / "config.py",
    REPO_ROOT / "layer" / "fleetbreaker" / "environment.py",
}
VARIABLES = {*STORE_VARIABLES, *(env_variable(field) for field in ENV_FIELDS)}


def sources() -> list[Path]:
    """Every Python module of the layer's package and of the functions."""
    paths = [
        *(REPO_ROOT / "layer" / "fleetbreaker").rglob("*.py"),
        *(REPO_ROOT / "functions").rglob("*.py"),
    ]
    return sorted(path for path in paths if path not in READERS)


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes: documentation may name the variables."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def variable_constants(tree: ast.AST) -> set[str]:
    """Local names bound to a reader's constant holding one of the variables."""
    import fleetbreaker.config
    import fleetbreaker.stores
    import fleetbreaker.stores.variables

    modules = {
        "fleetbreaker.stores": fleetbreaker.stores,
        "fleetbreaker.stores.variables": fleetbreaker.stores.variables,
        "fleetbreaker.config": fleetbreaker.config,
    }
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in modules:
            for alias in node.names:
                if getattr(modules[node.module], alias.name, None) in VARIABLES:
                    names.add(alias.asname or alias.name)
    return names


def reads(path: Path) -> list[str]:
    """Where a module names one of the variables in code, or looks one up by its constant."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = docstrings(tree)
    constants = variable_constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            named = sorted(v for v in VARIABLES if v in node.value)
            found += [f"{path.name}:{node.lineno} names {v}" for v in named]
        key = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "getenv", "pop"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        if isinstance(key, ast.Name) and key.id in constants:
            found.append(f"{path.name}:{node.lineno} looks up {key.id}")
    return found


def test_only_the_two_readers_read_the_store_and_breaker_variables() -> None:
    # GIVEN every module of the layer and the functions but stores/variables.py and config.py
    # WHEN their code (docstrings aside) is searched for the variables' names and lookups
    found = [where for path in sources() for where in reads(path)]
    # THEN none reads them: they pass their environment to the one factory instead
    assert found == []


def test_the_scan_finds_a_module_reading_a_variable(tmp_path: Path) -> None:
    # GIVEN a module that reads the table's variable itself, by name and by constant
    module = tmp_path / "reader.py"
    module.write_text(
        '"""Mentions CIRCUIT_BREAKER_TABLE in its docstring: allowed."""\n'
        "import os\n"
        "from fleetbreaker.stores import TABLE_ENV\n"
        'a = os.environ.get("CIRCUIT_BREAKER_TABLE")\n'
        "b = os.environ[TABLE_ENV]\n"
    )
    # THEN both reads are reported, the docstring is not
    assert sorted(reads(module)) == [
        "reader.py:4 names CIRCUIT_BREAKER_TABLE",
        "reader.py:5 looks up TABLE_ENV",
    ]


def test_a_breaker_without_config_takes_breaker_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN BREAKER_FAILURE_THRESHOLD=1 in the environment
    monkeypatch.setenv("BREAKER_FAILURE_THRESHOLD", "1")
    breaker = CircuitBreaker("env-threshold", store=MemoryStore())

    # WHEN one call fails
    with pytest.raises(ZeroDivisionError):
        breaker.call(lambda: 1 / 0)

    # THEN the breaker is open: the environment set its threshold
    assert breaker.config.failure_threshold == 1
    with pytest.raises(CircuitOpenError):
        breaker.call(lambda: None)


def test_an_explicit_config_ignores_the_breaker_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN BREAKER_FAILURE_THRESHOLD=1 but an explicit config with the default threshold
    monkeypatch.setenv("BREAKER_FAILURE_THRESHOLD", "1")
    breaker = CircuitBreaker("explicit", store=MemoryStore(), config=BreakerConfig())

    # WHEN one call fails THEN it stays closed: the argument wins over the environment
    with pytest.raises(ZeroDivisionError):
        breaker.call(lambda: 1 / 0)
    assert breaker.config.failure_threshold == 5
    assert breaker.call(lambda: "ran") == "ran"


def test_without_variables_the_documented_defaults_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for field in ENV_FIELDS:
        monkeypatch.delenv(env_variable(field), raising=False)
    assert CircuitBreaker("defaults", store=MemoryStore()).config == BreakerConfig()


def test_a_bad_breaker_variable_fails_the_breaker_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fleetbreaker import ConfigError

    monkeypatch.setenv("BREAKER_WINDOW_SECONDS", "soon")
    with pytest.raises(ConfigError, match="BREAKER_WINDOW_SECONDS must be a number"):
        CircuitBreaker("bad-env", store=MemoryStore())


def test_from_env_takes_store_and_config_from_one_environment() -> None:
    # GIVEN an environment naming a table and a threshold, and a classification override
    environ = {
        "CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
        "BREAKER_FAILURE_THRESHOLD": "3",
        "BREAKER_RECOVERY_TIMEOUT": "12",
    }

    # WHEN a breaker is built from it, overriding the threshold
    breaker = CircuitBreaker.from_env(
        "payment-api", environ=environ, failure_threshold=4, failure_exceptions=(OSError,)
    )

    # THEN the store is the table, the override wins over its variable, the rest is read
    assert isinstance(breaker.store, DynamoDBStore)
    assert breaker.store.table_name == "CircuitBreakers"
    assert breaker.config.failure_threshold == 4
    assert breaker.config.recovery_timeout == 12.0
    assert breaker.config.failure_exceptions == (OSError,)


def test_from_env_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CIRCUIT_BREAKER_TABLE", "FromProcess")
    monkeypatch.setenv("BREAKER_HALF_OPEN_MAX_PROBES", "3")
    breaker = CircuitBreaker.from_env("payment-api")
    assert isinstance(breaker.store, DynamoDBStore)
    assert breaker.store.table_name == "FromProcess"
    assert breaker.config.half_open_max_probes == 3
