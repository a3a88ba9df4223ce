"""RedisStore's Lua scripts: each operation's source with the record schema filled in, and the
policy as the one JSON argument the scripts read.

The scripts (``redis_common.lua`` in front of each ``redis_<operation>.lua``) hold
placeholders for every stored name, code and count; :func:`load_scripts` fills them from
:mod:`fleetbreaker.record`, so a name is spelled there only.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from fleetbreaker import record as schema
from fleetbreaker.policy import OVERRIDE_TTL_S, Policy, exact_ratio
from fleetbreaker.record import State
from fleetbreaker.rules import CLOCK_TOLERANCE_MS
from fleetbreaker.window import RECENT_BUCKETS

_OPERATIONS = (
    "load",
    "record_failure",
    "claim_probe",
    "settle_probe",
    "force_state",
    "tune",
    "report",
    "census",
)


def _lua_string(name: str) -> str:
    # The schema's names are plain text: a quote, a backslash or a control character would
    # need escaping in a Lua string.
    if not _LUA_PLAIN.fullmatch(name):
        raise ValueError(f"a stored name the Redis scripts cannot spell: {name!r}")
    return f"'{name}'"


_LUA_PLAIN = re.compile(r"[^'\\\x00-\x1f\x7f]+")
_PLACEHOLDER = re.compile(r"__[A-Z_]+__")


def _lua_pairs(fields: dict[str, str]) -> str:
    """A Lua list of {attribute, stored name} pairs, in the schema's order."""
    pairs = (f"{{{_lua_string(a)}, {_lua_string(n)}}}" for a, n in fields.items())
    return "{" + ", ".join(pairs) + "}"


def _schema_constants() -> dict[str, str]:
    """The Lua text of every placeholder in the scripts, from the record's schema (and the
    rules' limits): the scripts spell no stored name of their own."""
    leases = ", ".join(
        f"[{slot}] = {{{', '.join(map(_lua_string, schema.lease_fields(slot)))}}}"
        for slot in range(schema.MAX_PROBE_SLOTS)
    )
    buckets = ", ".join(
        f"[{slot}] = {{"
        + ", ".join(
            f"{attribute} = {_lua_string(schema.bucket_field(slot, code))}"
            for code, attribute in schema.BUCKET_CODES.items()
        )
        + "}"
        for slot in range(schema.WINDOW_BUCKETS)
    )
    census = ", ".join(
        f"[{slot}] = {{"
        + ", ".join(
            f"{attribute} = {_lua_string(schema.census_field(slot, code))}"
            for code, attribute in schema.CENSUS_CODES.items()
        )
        + "}"
        for slot in range(schema.WINDOW_BUCKETS)
    )
    quorum = ", ".join(
        f"[{_lua_string(code)}] = {_lua_string(attribute)}"
        for code, attribute in schema.QUORUM_CODES.items()
    )
    states = ", ".join(f"[{_lua_string(state.value)}] = true" for state in State)
    return {
        "__MAX_PROBE_SLOTS__": str(schema.MAX_PROBE_SLOTS),
        "__MAX_RECORD_DIGITS__": str(schema.MAX_RECORD_DIGITS),
        "__CLOCK_TOLERANCE_MS__": str(CLOCK_TOLERANCE_MS),
        "__STATES__": f"{{{states}}}",
        "__STATE_FIELD__": _lua_string(schema.STATE),
        "__NUMBER_FIELDS__": _lua_pairs(schema.NUMBER_FIELDS),
        "__OPTIONAL_NUMBER_FIELDS__": _lua_pairs(schema.OPTIONAL_NUMBER_FIELDS),
        "__TEXT_FIELDS__": _lua_pairs(schema.TEXT_FIELDS),
        "__LEASE_FIELDS__": f"{{{leases}}}",
        "__WINDOW_BUCKETS__": str(schema.WINDOW_BUCKETS),
        "__BUCKET_FIELDS__": f"{{{buckets}}}",
        "__CENSUS_FIELDS__": f"{{{census}}}",
        "__QUORUM_MAPS__": f"{{{quorum}}}",
        "__QUORUM_SEPARATOR__": _lua_string(schema.QUORUM_SEPARATOR),
        "__RECENT_BUCKETS__": str(RECENT_BUCKETS),
    }


class _Script:
    """One operation's Lua source and its SHA1, loaded into the server on first NOSCRIPT."""

    def __init__(self, operation: str, constants: dict[str, str]) -> None:
        package = resources.files("fleetbreaker.stores")
        common = package.joinpath("redis_common.lua").read_text(encoding="utf-8")
        body = package.joinpath(f"redis_{operation}.lua").read_text(encoding="utf-8")
        source = _PLACEHOLDER.sub(lambda match: constants[match.group(0)], f"{common}\n{body}")
        self.operation = operation
        self.source = source
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()


def load_scripts() -> dict[str, _Script]:
    constants = _schema_constants()
    return {operation: _Script(operation, constants) for operation in _OPERATIONS}


@lru_cache(maxsize=64)
def policy_json(policy: Policy) -> str:
    """The policy as the scripts read it (ARGV[2]): one JSON object of Policy's fields (a None
    one left out, so the script sees nil), with what the scripts derive from them."""
    import json  # only RedisStore needs it: kept off the breaker's import

    values: dict[str, Any] = {name: getattr(policy, name) for name in Policy.__match_args__}
    # The fractions are computed here, not read from Policy's cached properties: caching
    # them would add keys to the policy's __dict__ (which callers may copy into a new one).
    rate = policy.failure_rate
    values.update(
        override_ttl_s=OVERRIDE_TTL_S,
        bucket_ms=policy.bucket_ms,
        failure_ratio=None if rate is None else exact_ratio(rate),
        slow_ratio=exact_ratio(policy.slow_rate),
    )
    # json writes a float as its repr(), which Lua's cjson reads back to the same double: the
    # scripts' open-window arithmetic matches policy.open_duration_ms.
    return json.dumps({k: v for k, v in values.items() if v is not None}, separators=(",", ":"))
