"""One record schema: every stored name is spelled in fleetbreaker/record.py and nowhere else.

The Redis side of the seam is run for real in tests/redis/test_record_schema.py (a renamed
schema reaches the scripts and the parser; a rename on one side only fails the first
operation). These tests check the sources: the schema classifies every Record field, no Lua
script spells a stored name of its own, and no Python module of the layer but the schema does.
"""

from __future__ import annotations

import ast
import re
from importlib import resources
from pathlib import Path

from fleetbreaker import record as schema
from fleetbreaker.record import Record

# Record attributes a store keeps in structured form (not one scalar field each).
STRUCTURED = {"leases", "buckets", "census", "rev", *schema.QUORUM_CODES.values()}


def stored_names() -> set[str]:
    """Every fixed name the schema gives a stored field or a part of one."""
    names = {schema.STATE, schema.REV, *schema.NUMBER_FIELDS.values()}
    names.update(schema.OPTIONAL_NUMBER_FIELDS.values())
    names.update(schema.TEXT_FIELDS.values())
    names.update(schema.QUORUM_CODES)
    for slot in range(schema.MAX_PROBE_SLOTS):
        names.update(schema.lease_fields(slot))
    for slot in range(schema.WINDOW_BUCKETS):
        names.update(schema.bucket_field(slot, code) for code in schema.BUCKET_CODES)
        names.update(schema.census_field(slot, code) for code in schema.CENSUS_CODES)
    return names


def lua_sources() -> dict[str, str]:
    package = resources.files("fleetbreaker.stores")
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in package.iterdir()
        if entry.name.endswith(".lua")
    }


LUA_STRING = re.compile(r"'((?:[^'\\\n]|\\.)*)'|\"((?:[^\"\\\n]|\\.)*)\"")


def test_the_schema_names_every_field_of_the_record_once() -> None:
    # GIVEN the Record's fields and the schema's tables
    fields = list(Record.__match_args__)
    classified = [
        "state",
        *schema.NUMBER_FIELDS,
        *schema.OPTIONAL_NUMBER_FIELDS,
        *schema.TEXT_FIELDS,
        *STRUCTURED,
    ]

    # THEN each field is in exactly one of them (a new field must be given a stored form)
    assert sorted(classified) == sorted(fields)
    assert (*schema.NUMBER_FIELDS, *schema.OPTIONAL_NUMBER_FIELDS) == schema.RECORD_NUMBERS
    assert tuple(schema.TEXT_FIELDS) == schema.RECORD_TEXTS


def test_stored_names_are_distinct() -> None:
    # GIVEN the scalar fields' stored names, the lease and the bucket fields
    scalars = [schema.STATE, schema.REV, *schema.NUMBER_FIELDS.values()]
    scalars += [*schema.OPTIONAL_NUMBER_FIELDS.values(), *schema.TEXT_FIELDS.values()]
    leases = [name for slot in range(schema.MAX_PROBE_SLOTS) for name in schema.lease_fields(slot)]
    buckets = [
        schema.bucket_field(slot, code)
        for slot in range(schema.WINDOW_BUCKETS)
        for code in schema.BUCKET_CODES
    ]
    census = [
        schema.census_field(slot, code)
        for slot in range(schema.WINDOW_BUCKETS)
        for code in schema.CENSUS_CODES
    ]

    # THEN no two parts of a record share a stored name
    everything = scalars + leases + buckets + census + list(schema.QUORUM_CODES)
    assert len(set(everything)) == len(everything)


def test_no_lua_script_spells_a_stored_name() -> None:
    # GIVEN every Lua source RedisStore loads, before the schema is filled in
    sources = lua_sources()
    assert {"redis_common.lua", "redis_report.lua"} <= set(sources)
    names = stored_names()

    # WHEN their string literals are collected
    literals = {
        (file, single or double)
        for file, text in sources.items()
        for single, double in LUA_STRING.findall(text)
    }

    # THEN none is a stored name, or the start of a lease or bucket field built by hand
    spelled = {
        (file, literal)
        for file, literal in literals
        if literal in names or literal.startswith(("probe", "w0", "w_")) or literal == "w"
    }
    assert spelled == set()


def test_the_lua_sources_take_the_schema_through_placeholders() -> None:
    # GIVEN the shared Lua helpers
    common = lua_sources()["redis_common.lua"]

    # THEN the names, codes and counts they use are placeholders RedisStore fills in
    for placeholder in (
        "__STATE_FIELD__",
        "__NUMBER_FIELDS__",
        "__TEXT_FIELDS__",
        "__LEASE_FIELDS__",
        "__BUCKET_FIELDS__",
        "__QUORUM_MAPS__",
        "__QUORUM_SEPARATOR__",
        "__WINDOW_BUCKETS__",
        "__MAX_PROBE_SLOTS__",
    ):
        assert f"= {placeholder}" in common


LAYER = Path(__file__).resolve().parents[2] / "layer" / "fleetbreaker"
# The one module that spells stored names.
SCHEMA_MODULE = "record.py"
# Public output keys that share a word with a stored field: the snapshot's JSON, the CLI's
# --json keys and status labels, the transition log's extra field. They name what those
# outputs show, not where a store keeps it; a store never reads them.
OUTPUT_KEYS = {
    "snapshot.py": {"state", "failures", "open_until", "updated_at"},
    "cli/view.py": {"state", "failures", "open_until", "tuned", "last_action"},
    "events.py": {"state"},
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of a module's, classes' and functions' docstring nodes (prose, not names)."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def spelled_names(path: Path, names: set[str]) -> set[str]:
    """The stored names ``path`` spells as string literals (docstrings aside), and any literal
    that starts a lease or bucket field by hand ("probe", "w")."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    spelled = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            if text in names or text in ("probe", "w"):
                spelled.add(text)
    return spelled


def test_no_python_module_but_the_schema_spells_a_stored_name() -> None:
    # GIVEN every module of the layer
    modules = {path.relative_to(LAYER).as_posix(): path for path in LAYER.rglob("*.py")}
    assert {"stores/redis.py", "stores/dynamodb/codec.py", "stores/memory.py"} <= set(modules)
    names = stored_names()

    # WHEN the string literals that are stored names are collected, module by module
    spelled = {
        module: found
        for module, path in sorted(modules.items())
        if module != SCHEMA_MODULE and (found := spelled_names(path, names))
    }

    # THEN only the public outputs' own keys remain, each still needed
    assert spelled == OUTPUT_KEYS
    assert spelled_names(modules[SCHEMA_MODULE], names) >= {schema.STATE, schema.GEN}


# What a store may import from the package: the record and its schema, the rules below it,
# and its own plumbing, the redaction of its messages and the list of variable names included
# (leaves: the standard library only). (FallbackStore and the deadline wrap stores for the
# breaker: they emit its events and read its limits, so they are not stores in this sense.)
STORE_MAY_IMPORT = {
    "fleetbreaker.environment",
    "fleetbreaker.errors",
    "fleetbreaker.frozen",
    "fleetbreaker.policy",
    "fleetbreaker.record",
    "fleetbreaker.redaction",
    "fleetbreaker.rules",
    "fleetbreaker.window",
}


def package_imports(path: Path) -> set[str]:
    """The fleetbreaker modules ``path`` imports (at any level, typing-only ones included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in names if name.startswith("fleetbreaker"))
    return found


def test_no_store_imports_anything_above_the_rules_and_the_schema() -> None:
    # GIVEN every store module (the wrappers the breaker puts around a store aside)
    stores = [
        path
        for path in (LAYER / "stores").rglob("*.py")
        if path.name not in ("fallback.py", "deadline.py")
    ]
    assert len(stores) >= 8

    # WHEN their imports from the package are collected
    above = {
        path.relative_to(LAYER).as_posix(): {
            name
            for name in package_imports(path)
            if not name.startswith("fleetbreaker.stores")
            and not any(name == m or name.startswith(f"{m}.") for m in STORE_MAY_IMPORT)
            and name != "fleetbreaker"
        }
        for path in stores
    }

    # THEN none reaches the breaker, its config, tuning, listeners or reporting
    assert {module: names for module, names in above.items() if names} == {}
