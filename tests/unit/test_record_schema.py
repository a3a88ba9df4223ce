"""One record schema: every stored name is spelled in fleetbreaker/record.py and nowhere else.

The Redis side of the seam is run for real in tests/redis/test_record_schema.py (a renamed
schema reaches the scripts and the parser; a rename on one side only fails the first
operation). These tests check the sources: the schema classifies every Record field, and no
Lua script spells a stored name of its own.
"""

from __future__ import annotations

import re
from importlib import resources

from fleetbreaker import record as schema
from fleetbreaker.record import Record

# Record attributes a store keeps in structured form (not one scalar field each).
STRUCTURED = {"leases", "buckets", "rev", *schema.QUORUM_CODES.values()}


def stored_names() -> set[str]:
    """Every fixed name the schema gives a stored field or a part of one."""
    names = {schema.STATE, schema.REV, *schema.NUMBER_FIELDS.values()}
    names.update(schema.TEXT_FIELDS.values())
    names.update(schema.QUORUM_CODES)
    for slot in range(schema.MAX_PROBE_SLOTS):
        names.update(schema.lease_fields(slot))
    for slot in range(schema.WINDOW_BUCKETS):
        names.update(schema.bucket_field(slot, code) for code in schema.BUCKET_CODES)
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
    classified = ["state", *schema.NUMBER_FIELDS, *schema.TEXT_FIELDS, *STRUCTURED]

    # THEN each field is in exactly one of them (a new field must be given a stored form)
    assert sorted(classified) == sorted(fields)
    assert tuple(schema.NUMBER_FIELDS) == schema.RECORD_NUMBERS
    assert tuple(schema.TEXT_FIELDS) == schema.RECORD_TEXTS


def test_stored_names_are_distinct() -> None:
    # GIVEN the scalar fields' stored names, the lease and the bucket fields
    scalars = [schema.STATE, schema.REV, *schema.NUMBER_FIELDS.values()]
    scalars += list(schema.TEXT_FIELDS.values())
    leases = [name for slot in range(schema.MAX_PROBE_SLOTS) for name in schema.lease_fields(slot)]
    buckets = [
        schema.bucket_field(slot, code)
        for slot in range(schema.WINDOW_BUCKETS)
        for code in schema.BUCKET_CODES
    ]

    # THEN no two parts of a record share a stored name
    everything = scalars + leases + buckets + list(schema.QUORUM_CODES)
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
