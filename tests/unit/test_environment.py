"""A misspelt setting is named: unknown BREAKER_*, CIRCUIT_BREAKER_* and FLEETBREAKER_*
variables get a WARNING once per process with the nearest known name, and a ConfigError under
BREAKER_VERIFY_STORE=true (fleetbreaker.environment).

The known names are the readers' own (config.ENV_FIELDS, stores.STORE_VARIABLES, the switch's
variable, environment.APP_VARIABLES); the seam with what reads and sets variables is tested
from both sides: every prefixed name the package and the functions name in code, and every
one template.yaml sets, is known, and every app variable is one the functions read.

Each test uses its own misspelling: the WARNING is once per process and per name.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from devtools.sam_template import load_template
from devtools.servers import REPO_ROOT
from fleetbreaker import BreakerConfig, CircuitBreaker, ConfigError, MemoryStore
from fleetbreaker.config import ENV_FIELDS, env_variable
from fleetbreaker.environment import APP_VARIABLES, PREFIXES, TOOL_VARIABLES
from fleetbreaker.stores import STORE_VARIABLES, from_env
from fleetbreaker.switch import DISABLED_ENV

KNOWN = {
    *(env_variable(f) for f in ENV_FIELDS),
    *STORE_VARIABLES,
    DISABLED_ENV,
    *APP_VARIABLES,
    *TOOL_VARIABLES,
}
PREFIXED = re.compile(r"(?:BREAKER|CIRCUIT_BREAKER|FLEETBREAKER)_[A-Z0-9_]+")
TABLE = {"CIRCUIT_BREAKER_TABLE": "CircuitBreakers"}


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process environment without any variable under our prefixes."""
    import os

    for name in list(os.environ):
        if name.startswith(PREFIXES):
            monkeypatch.delenv(name)
    return monkeypatch


def warnings_about(caplog: pytest.LogCaptureFixture, variable: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and variable in r.getMessage()
    ]


def test_a_misspelt_breaker_variable_is_logged_once_with_the_nearest_name(
    clean_environment: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN BREAKER_FAILURE_THRESHHOLD=2 (one H too many) in the environment
    clean_environment.setenv("BREAKER_FAILURE_THRESHHOLD", "2")

    # WHEN two breakers are built from the environment
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        first = CircuitBreaker("misspelt-a", store=MemoryStore())
        CircuitBreaker("misspelt-b", store=MemoryStore())

    # THEN the default stands, and one WARNING names the variable and the nearest known name
    assert first.config.failure_threshold == 5
    assert warnings_about(caplog, "BREAKER_FAILURE_THRESHHOLD") == [
        "fleetbreaker: BREAKER_FAILURE_THRESHHOLD is not a variable fleetbreaker reads "
        "(did you mean BREAKER_FAILURE_THRESHOLD?); it is ignored"
    ]


def test_under_verify_store_a_misspelt_variable_fails_the_construction(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    # GIVEN a misspelt variable and BREAKER_VERIFY_STORE=true
    clean_environment.setenv("BREAKER_RECOVERY_TIMEOUTS", "30")
    clean_environment.setenv("BREAKER_VERIFY_STORE", "true")

    # WHEN a breaker is built THEN the ConfigError names the variable and the suggestion
    with pytest.raises(ConfigError) as refused:
        CircuitBreaker("strict", store=MemoryStore())
    assert "BREAKER_RECOVERY_TIMEOUTS is not a variable fleetbreaker reads" in str(refused.value)
    assert "did you mean BREAKER_RECOVERY_TIMEOUT?" in str(refused.value)


def test_a_misspelt_store_variable_is_named_by_the_store_factory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN the table's variable and a misspelt IAM variable beside it
    env = {**TABLE, "CIRCUIT_BREAKER_REDIS_IAM_USR": "app"}

    # WHEN the store is built from it
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        from_env(env, endpoint_url="http://127.0.0.1:1")

    # THEN the WARNING suggests the store variable it resembles
    assert warnings_about(caplog, "CIRCUIT_BREAKER_REDIS_IAM_USR") == [
        "fleetbreaker: CIRCUIT_BREAKER_REDIS_IAM_USR is not a variable fleetbreaker reads "
        "(did you mean CIRCUIT_BREAKER_REDIS_IAM_USER?); it is ignored"
    ]


def test_under_verify_store_a_misspelt_store_variable_fails_the_breaker_from_env() -> None:
    # GIVEN a misspelt store variable and BREAKER_VERIFY_STORE=yes
    env = {**TABLE, "CIRCUIT_BREAKER_TABEL": "Other", "BREAKER_VERIFY_STORE": "yes"}

    # WHEN a breaker is built from that environment THEN it is refused, naming both names
    with pytest.raises(ConfigError, match=r"CIRCUIT_BREAKER_TABEL .*CIRCUIT_BREAKER_TABLE\?"):
        CircuitBreaker.from_env("strict-store", environ=env)


def test_a_misspelt_switch_is_named(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        BreakerConfig.from_env({"FLEETBREAKER_DISABLE": "true"})

    assert "did you mean FLEETBREAKER_DISABLED?" in " ".join(
        warnings_about(caplog, "FLEETBREAKER_DISABLE ")
    )


def test_a_name_close_to_nothing_says_so_and_never_shows_its_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        BreakerConfig.from_env({"BREAKER_XYZZY_QWERTY_1": "s3cret-value"})

    [message] = warnings_about(caplog, "BREAKER_XYZZY_QWERTY_1")
    assert "no known name is close" in message
    assert "s3cret-value" not in caplog.text


def test_every_known_variable_passes_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN every name a reader reads, set (the store to a table)
    env = dict.fromkeys(KNOWN, "")
    env.update(TABLE)

    # WHEN both readers read it THEN nothing is said
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        BreakerConfig.from_env(env)
        from_env(env, endpoint_url="http://127.0.0.1:1")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_other_variables_are_none_of_our_business(caplog: pytest.LogCaptureFixture) -> None:
    env = {"MY_BREAKER_THING": "1", "POWERTOOLS_SERVICE_NAME": "x", "BREAKERS": "2"}

    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        BreakerConfig.from_env(env, verify_store=True)
    assert caplog.records == []


# -- the seam: what the code reads and the template sets, against the known names --------------


def string_constants(path: Path) -> set[str]:
    """Every string constant of a module that is exactly one prefixed variable name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and PREFIXED.fullmatch(node.value)
    }


def code_names(*extra_roots: str) -> dict[str, set[str]]:
    """Prefixed names the package and the functions (and ``extra_roots``) name in code:
    name -> modules."""
    found: dict[str, set[str]] = {}
    roots = [REPO_ROOT / "layer" / "fleetbreaker", REPO_ROOT / "functions"]
    roots += [REPO_ROOT / root for root in extra_roots]
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        for name in string_constants(path):
            found.setdefault(name, set()).add(str(path.relative_to(REPO_ROOT)))
    return found


def template_names(template: dict[str, Any]) -> set[str]:
    """Every variable the template sets, on a function or in Globals."""
    names: set[str] = set()
    sections = [template.get("Globals", {}).get("Function", {})]
    sections += [r.get("Properties", {}) for r in template.get("Resources", {}).values()]
    for properties in sections:
        variables = (properties.get("Environment") or {}).get("Variables") or {}
        names.update(variables)
    return names


def test_every_prefixed_name_the_code_names_is_known() -> None:
    found = code_names()

    assert {"BREAKER_MAPPINGS", "BREAKER_NAME", DISABLED_ENV} <= set(found)  # the scan sees
    assert {name: where for name, where in found.items() if name not in KNOWN} == {}


def test_every_prefixed_variable_the_template_sets_is_known() -> None:
    names = {name for name in template_names(load_template()) if name.startswith(PREFIXES)}

    assert "BREAKER_NAME" in names  # the walk sees the functions' variables
    assert "CIRCUIT_BREAKER_TABLE" in names
    assert names - KNOWN == set()


def test_every_app_variable_is_one_the_functions_read() -> None:
    # The other side: no name is known that nothing reads (a stale entry would hide a typo).
    found = code_names()

    read_by_functions = {
        name for name, where in found.items() if any(w.startswith("functions/") for w in where)
    }
    assert set(APP_VARIABLES) <= read_by_functions


def test_every_tool_variable_is_one_the_repository_s_tooling_reads() -> None:
    # GIVEN what the tooling is: the Makefile, devtools and the opt-in deployed suite
    tooling = [REPO_ROOT / "Makefile", REPO_ROOT / "tests" / "conftest.py"]
    tooling += sorted((REPO_ROOT / "devtools").glob("*.py"))
    tooling += sorted((REPO_ROOT / "tests" / "deployed").glob("*.py"))
    text = "\n".join(path.read_text() for path in tooling)

    # THEN every tool variable is read there (a stale entry would hide a typo), and devtools
    # names no prefixed variable that is not known
    assert [name for name in TOOL_VARIABLES if name not in text] == []
    found = code_names("devtools")
    assert {name: where for name, where in found.items() if name not in KNOWN} == {}
