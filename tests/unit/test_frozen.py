"""fleetbreaker.frozen: value classes that behave as frozen dataclasses do.

Each test builds the same class twice, once with ``@frozen`` and once with
``@dataclass(frozen=True)``, and checks that both answer alike.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import sys
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest

from fleetbreaker import frozen as frozen_module
from fleetbreaker.frozen import frozen, replace
from fleetbreaker.record import Lease, Outcome, Record, State
from fleetbreaker.results import Admission
from fleetbreaker.rules import Verdict


@frozen
class Point:
    x: int
    y: int = 0
    tags: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.x + self.y


@dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 0
    tags: Mapping[str, int] = field(default_factory=dict)


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1,), {}),
    ((1, 2), {}),
    ((), {"x": 1, "y": 2}),
    ((1,), {"tags": {"a": 1}}),
]
BAD_CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),  # missing x
    ((1, 2, {}, 4), {}),  # too many
    ((1,), {"x": 2}),  # x twice
    ((1,), {"z": 2}),  # unknown
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_construction_repr_and_equality_match_a_frozen_dataclass(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # GIVEN the same arguments WHEN both classes are built THEN they hold and show the same
    ours, theirs = Point(*args, **kwargs), DataPoint(*args, **kwargs)
    assert repr(ours) == repr(theirs).replace("DataPoint", "Point")
    assert (ours.x, ours.y, ours.tags) == (theirs.x, theirs.y, theirs.tags)
    assert ours == Point(*args, **kwargs)


@pytest.mark.parametrize(("args", "kwargs"), BAD_CALLS)
def test_bad_arguments_raise_type_error_like_a_dataclass(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError):
        DataPoint(*args, **kwargs)
    with pytest.raises(TypeError):
        Point(*args, **kwargs)


def test_default_factory_gives_each_instance_its_own_value() -> None:
    assert Point(1).tags is not Point(1).tags


def test_instances_are_immutable() -> None:
    point = Point(1)
    with pytest.raises(FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del point.x  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        point.other = 1  # type: ignore[attr-defined]


def test_equality_is_by_class_and_fields() -> None:
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(2, 1)
    assert Point(1, 2) != DataPoint(1, 2)
    assert Point(1, 2) != (1, 2, {})


def test_hash_follows_the_fields_and_unhashable_fields_make_it_unhashable() -> None:
    assert hash(Lease("t", 5, 1)) == hash(Lease("t", 5, 1))
    assert {Lease("t", 5, 1), Lease("t", 5, 1)} == {Lease("t", 5, 1)}
    with pytest.raises(TypeError):
        hash(Point(1))  # tags is a dict, as with a frozen dataclass


def test_replace_copies_with_changes_and_leaves_the_original() -> None:
    record = Record(state=State.OPEN, gen=3, leases={0: Lease("t", 5)})
    changed = replace(record, gen=4)
    assert changed == Record(state=State.OPEN, gen=4, leases={0: Lease("t", 5)})
    assert record.gen == 3
    assert changed.leases is record.leases  # shallow, as dataclasses.replace


def test_replace_rejects_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field 'colour'"):
        replace(Record(), colour="red")


def test_methods_the_class_defines_are_kept() -> None:
    assert Point(1, 2).total == 3
    assert Point.__match_args__ == ("x", "y", "tags")  # type: ignore[misc]


def test_pickle_and_deepcopy_round_trip() -> None:
    record = Record(state=State.HALF_OPEN, gen=2, leases={1: Lease("t", 9, 3)}, tuned="{}")
    assert pickle.loads(pickle.dumps(record)) == record
    assert copy.deepcopy(record) == record


def test_a_required_field_after_a_default_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="non-default field 'b'"):

        @frozen
        class Bad:
            a: int = 0
            b: int

    with pytest.raises(TypeError, match="non-default argument 'b'"):

        @dataclass
        class AlsoBad:
            a: int = 0
            b: int  # type: ignore[misc]


def test_frozen_classes_are_not_dataclasses() -> None:
    # What the module says: dataclasses' own helpers do not know them (use replace above).
    assert not dataclasses.is_dataclass(Record())


@frozen
class Answer:
    value: int
    changed: bool = False
    token: str | None = None


@dataclass(frozen=True)
class DataAnswer:
    value: int
    changed: bool = False
    token: str | None = None


@pytest.mark.parametrize(
    "args",
    [(), (1,), (1, True), (1, True, "t"), (1, True, "t", "extra")],
    ids=["none", "first", "two", "all", "too-many"],
)
def test_positional_arguments_with_plain_defaults_build_what_a_dataclass_builds(
    args: tuple[Any, ...],
) -> None:
    # GIVEN a class whose fields after the first have plain defaults (the positional path)
    # WHEN it is built from positional arguments alone
    # THEN it holds what the dataclass holds, or refuses as the dataclass does
    try:
        expected: Any = DataAnswer(*args)
    except TypeError:
        with pytest.raises(TypeError):
            Answer(*args)
        return
    built = Answer(*args)
    assert dataclasses.astuple(expected) == (built.value, built.changed, built.token)
    assert repr(built) == repr(expected).replace("DataAnswer", "Answer")


# -- hot value classes whose __init__ is written out ---------------------------------------

# Built on every store answer (Outcome), every admission that is not a healthy call's
# (Verdict) and every rejection (Admission): frozen's shared __init__ costs twice a written
# out one, so these write their own, which frozen keeps.
HAND_WRITTEN: list[type[Any]] = [Outcome, Verdict, Admission]


def _writes_its_own_init(cls: type[Any]) -> bool:
    init = cls.__dict__.get("__init__")
    return init is not None and init.__code__.co_filename != frozen_module.__file__


@pytest.mark.parametrize("cls", HAND_WRITTEN, ids=lambda cls: cls.__name__)
def test_a_written_out_init_takes_the_fields_in_order_with_their_defaults(
    cls: type[Any],
) -> None:
    # GIVEN a value class whose __init__ is written out
    assert _writes_its_own_init(cls)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = cls.__frozen_fields__
    # THEN it takes every field, in declaration order, by position or by keyword
    assert tuple(param.name for param in params) == fields
    assert {param.kind for param in params} == {inspect.Parameter.POSITIONAL_OR_KEYWORD}
    # AND each default is the field's (a class attribute), the others are required
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    assert defaults == {name: vars(cls)[name] for name in fields if name in vars(cls)}
    # AND what it builds holds every field: the given ones, then the defaults
    given = {name: object() for name in fields if name not in defaults}
    built = cls(*given.values())
    assert vars(built) == {**given, **defaults}
    assert built == cls(**given)


def test_every_written_out_init_is_held_by_the_test_above() -> None:
    # GIVEN every frozen class of the package's modules loaded here
    import fleetbreaker.breaker  # noqa: F401  (loads the call path's modules)

    classes = {
        cls
        for name, module in list(sys.modules.items())
        if name.startswith("fleetbreaker.")
        for cls in vars(module).values()
        if isinstance(cls, type) and hasattr(cls, "__frozen_fields__")
    }
    # THEN those that write their own __init__ are the ones checked above
    assert {cls for cls in classes if _writes_its_own_init(cls)} == set(HAND_WRITTEN)
