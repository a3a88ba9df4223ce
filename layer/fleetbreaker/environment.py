"""Every variable name fleetbreaker knows under its prefixes, and the check that names a
misspelt one instead of ignoring it.

``BREAKER_FAILURE_THRESHHOLD=2`` would otherwise leave the threshold at its default of 5 with
no word said. The known names, one list (:func:`known_variables`):

- ``BREAKER_<FIELD>``: :meth:`BreakerConfig.from_env <fleetbreaker.config.BreakerConfig.
  from_env>` reads one per field of ``config.ENV_FIELDS`` and passes their names in;
- the store variables (:data:`STORE_VARIABLES`), which :mod:`fleetbreaker.stores.variables`
  reads;
- the test switch's :data:`DISABLED_ENV`, which :mod:`fleetbreaker.switch` reads;
- the SAM app's function variables (:data:`APP_VARIABLES`), which functions/ reads and
  template.yaml sets;
- the repository's test tooling (:data:`TOOL_VARIABLES`), which tests/ and devtools/ read.

Where the environment is read at a breaker's construction, the readers check it:
``BreakerConfig.from_env`` every prefix (:data:`PREFIXES`), ``stores.from_env`` its own
``CIRCUIT_BREAKER_*`` (for a breaker given its config but not its store). A variable under a
prefix that is not a known name is logged once per process at WARNING with the nearest known
name (:mod:`difflib`); under ``BREAKER_VERIFY_STORE=true`` the config refuses it with a
:class:`~fleetbreaker.errors.ConfigError` naming the variable and the suggestion, so the
function's init fails as it does for a misconfigured store.

What it trusts: the names in the environment, never their values. A message names the
variable, never its value (which may be a password). A leaf module: it imports nothing of the
package, so every reader can import it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Mapping

# The store variables: the table, the Redis URL, the ElastiCache IAM login.
TABLE_ENV = "CIRCUIT_BREAKER_TABLE"
URL_ENV = "CIRCUIT_BREAKER_REDIS_URL"
IAM_USER_ENV = "CIRCUIT_BREAKER_REDIS_IAM_USER"
IAM_CACHE_ENV = "CIRCUIT_BREAKER_REDIS_IAM_CACHE"
STORE_VARIABLES = (TABLE_ENV, URL_ENV, IAM_USER_ENV, IAM_CACHE_ENV)
# The test switch's variable.
DISABLED_ENV = "FLEETBREAKER_DISABLED"
# The variables the SAM app's functions (functions/) read under our prefixes; template.yaml
# sets them (tests/unit/test_environment.py holds the three lists together).
APP_VARIABLES = ("BREAKER_NAME", "BREAKER_MAPPINGS")
# The repository's own tooling under our prefix: the opt-in deployed suite's stack
# (`make test-deployed`) and devtools' moto server switch. A process that runs those tests has
# them set and builds breakers: it must not be warned, nor refused under verify_store.
TOOL_VARIABLES = ("FLEETBREAKER_STACK", "FLEETBREAKER_MOTO_VALIDATE_ONCE")
# The prefixes whose every variable must be a known name.
PREFIXES = ("BREAKER_", "CIRCUIT_BREAKER_", "FLEETBREAKER_")


def known_variables(breaker_variables: Iterable[str]) -> frozenset[str]:
    """Every known name: the config's ``breaker_variables`` and the lists above."""
    return frozenset(
        (*breaker_variables, *STORE_VARIABLES, DISABLED_ENV, *APP_VARIABLES, *TOOL_VARIABLES)
    )


log = logging.getLogger("fleetbreaker")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` is most likely a misspelling of (None: none is close)."""
    import difflib  # only once an unknown name is found

    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_variables(
    environ: Mapping[str, str], prefixes: Iterable[str], known: Collection[str]
) -> list[tuple[str, str | None]]:
    """Each variable of ``environ`` under ``prefixes`` that is not in ``known``, with its
    nearest known name, sorted by name."""
    heads = tuple(prefixes)
    unknown = sorted(name for name in environ if name.startswith(heads) and name not in known)
    return [(name, nearest(name, known)) for name in unknown]


def describe(name: str, suggestion: str | None) -> str:
    """``NAME is not a variable fleetbreaker reads (did you mean ...?)``."""
    hint = f"did you mean {suggestion}?" if suggestion else "no known name is close"
    return f"{name} is not a variable fleetbreaker reads ({hint})"


def check_variables(
    environ: Mapping[str, str],
    prefixes: Iterable[str],
    known: Collection[str],
    *,
    strict_by: str | None,
) -> str | None:
    """Name every unknown variable under ``prefixes``: a WARNING once per process for each
    (None returned), or, when ``strict_by`` names the setting that refuses them (the
    ``verify_store`` variable, set true), the refusal the caller raises as a ConfigError,
    naming them all with their suggestions."""
    unknown = unknown_variables(environ, prefixes, known)
    if not unknown:
        return None
    if strict_by is not None:
        return (
            "; ".join(describe(name, hint) for name, hint in unknown)
            + f": {strict_by}=true refuses an unknown "
            + ", ".join(f"{prefix}*" for prefix in PREFIXES)
            + " variable (correct or remove it)"
        )
    with _warned_lock:
        fresh = [(name, hint) for name, hint in unknown if name not in _warned]
        _warned.update(name for name, _ in fresh)
    for name, hint in fresh:
        log.warning(
            "fleetbreaker: %s; it is ignored",
            describe(name, hint),
            extra={"breaker_event": "unknown_variable", "variable": name, "suggestion": hint},
        )
    return None
