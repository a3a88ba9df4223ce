"""Immutable value classes that cost nothing to define: the cold-start twin of dataclasses.

``@dataclass(frozen=True)`` writes each class's ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__`` and ``__delattr__`` as source text and compiles it with
``exec`` while the module imports: six compilations per class, a few hundred microseconds
each on Python 3.11 and 3.12. The rules module alone held ten such classes, and every Lambda
cold start paid for them. :func:`frozen` gives a class the same behaviour from methods that
are compiled once, here, and shared by every class:

- ``__init__`` takes the fields positionally or by keyword, in declaration order, with their
  defaults (a :func:`dataclasses.field` ``default_factory`` too), and raises ``TypeError``
  for a missing, repeated or unknown argument;
- ``__eq__`` and ``__hash__`` compare and hash the fields, as a tuple, between instances of
  the same class; ``__repr__`` is ``Name(field=value, ...)``;
- assigning or deleting an attribute raises :class:`dataclasses.FrozenInstanceError`.

A method the class defines itself is kept. :func:`replace` is :func:`dataclasses.replace`
for these classes. Type checkers see a frozen dataclass (``dataclass_transform``).

:func:`public_value` is the same for the public value classes users may hand to
``dataclasses.replace``, ``fields`` or ``asdict`` (``BreakerConfig``, ``Admission``,
``RecordResult``): it also writes the field table those functions read, and supports what
``BreakerConfig`` uses: ``field(compare=False)``, ``InitVar`` fields (passed to
``__post_init__``, never stored) and ``__post_init__``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from typing import dataclass_transform
else:
    # typing has it from Python 3.11 on; at run time it only marks the decorator.
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorator: decorator


T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: type[T]) -> type[T]:
    """Make ``cls`` an immutable value class of its annotated fields (see the module doc)."""
    return _build(cls, public=False)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def public_value(cls: type[T]) -> type[T]:
    """:func:`frozen`, and known to ``dataclasses.fields``, ``replace`` and ``asdict``."""
    return _build(cls, public=True)


@dataclass_transform(field_specifiers=(field,))
def mutable_value(cls: type[T]) -> type[T]:
    """:func:`public_value` whose fields can be assigned (counters): ``@dataclass`` twin,
    unhashable as a mutable dataclass is."""
    return _build(cls, public=True, mutable=True)


def _is_initvar(annotation: object) -> bool:
    # Annotations are strings under `from __future__ import annotations`.
    if isinstance(annotation, str):
        return annotation.startswith(("InitVar[", "dataclasses.InitVar["))
    return isinstance(annotation, dataclasses.InitVar)


def _build(cls: type[T], public: bool, mutable: bool = False) -> type[T]:
    # The class's own annotations (not its bases'), in declaration order, on every version.
    annotations: dict[str, Any] = cls.__annotations__
    initvars = tuple(name for name, kind in annotations.items() if _is_initvar(kind))
    names = tuple(name for name in annotations if name not in initvars)
    params = names + initvars  # __init__'s order: InitVars are declared last here
    if params != tuple(annotations):
        raise TypeError(f"InitVar fields must come last in {cls!r}")
    defaults: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    uncompared: set[str] = set()
    hidden: set[str] = set()
    table: dict[str, Field[Any]] = {}
    for name in params:
        value = cls.__dict__.get(name, MISSING)
        if public:
            table[name] = _table_entry(name, annotations[name], value, name in initvars)
        if isinstance(value, Field):
            if not value.compare:
                uncompared.add(name)
            if not value.repr:
                hidden.add(name)
            if value.default_factory is not MISSING:
                factories[name] = value.default_factory
            elif value.default is not MISSING:
                defaults[name] = value.default
            delattr(cls, name)
            if name in defaults:
                setattr(cls, name, defaults[name])
        elif value is not MISSING:
            defaults[name] = value
        elif defaults or factories:
            raise TypeError(f"non-default field {name!r} follows a default field in {cls!r}")
    count = len(params)
    qualname = cls.__qualname__
    compared = tuple(name for name in names if name not in uncompared)
    shown = tuple(name for name in names if name not in hidden)
    post_init = getattr(cls, "__post_init__", None)
    # The common call, on hot paths (a store's answer is an Outcome): fields given by
    # position, every one after them a plain default. Its values are the arguments followed
    # by the defaults' tail; anything else takes the general path below.
    first_default = count - len(defaults)
    tail = tuple(defaults.get(name) for name in params[first_default:])
    positional_only = (
        not factories
        and not initvars
        and post_init is None
        and all(name in defaults for name in params[first_default:])
    )

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = len(args)
        if positional_only and not kwargs and first_default <= given <= count:
            self.__dict__.update(zip(params, args + tail[given - first_default :], strict=True))
            return
        if given > count:
            raise TypeError(
                f"{qualname}.__init__() takes {count + 1} positional arguments but "
                f"{given + 1} were given"
            )
        values = dict(zip(params, args, strict=False))  # fewer args than fields
        for name in params[given:]:
            if name in kwargs:
                values[name] = kwargs.pop(name)
            elif name in defaults:
                values[name] = defaults[name]
            elif name in factories:
                values[name] = factories[name]()
            else:
                raise TypeError(f"{qualname}.__init__() missing required argument: {name!r}")
        for name in kwargs:
            problem = "got multiple values for" if name in values else "got an unexpected"
            raise TypeError(f"{qualname}.__init__() {problem} keyword argument {name!r}")
        extra = [values.pop(name) for name in initvars]
        # Bypasses the frozen __setattr__, as dataclasses' own __init__ does.
        self.__dict__.update(values)
        if post_init is not None:
            post_init(self, *extra)

    def fields_of(self: Any) -> tuple[Any, ...]:
        state = self.__dict__
        return tuple(state[name] for name in compared)

    def __repr__(self: Any) -> str:
        state = self.__dict__
        return f"{qualname}({', '.join(f'{name}={state[name]!r}' for name in shown)})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return fields_of(self) == fields_of(other)

    def __hash__(self: Any) -> int:
        return hash(fields_of(self))

    def __setattr__(self: Any, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self: Any, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    methods: dict[str, Callable[..., Any]] = {
        "__init__": __init__,
        "__repr__": __repr__,
        "__eq__": __eq__,
        "__hash__": __hash__,
        "__setattr__": __setattr__,
        "__delattr__": __delattr__,
    }
    if mutable:
        del methods["__hash__"], methods["__setattr__"], methods["__delattr__"]
        setattr(cls, "__hash__", None)  # noqa: B010 (as a dataclass with eq and not frozen)
    for method_name, method in methods.items():
        if method_name not in cls.__dict__:
            method.__qualname__ = f"{qualname}.{method_name}"
            setattr(cls, method_name, method)
    setattr(cls, "__match_args__", names)  # noqa: B010 (mypy: not declared on the class)
    setattr(cls, "__frozen_fields__", names)  # noqa: B010
    if table:
        setattr(cls, "__dataclass_fields__", table)  # noqa: B010
    return cls


@dataclasses.dataclass(init=False, repr=False, eq=False)
class _Marked:
    """A dataclass that generates no method: its two entries carry the marks ``fields`` and
    ``replace`` look for (a field, an init-only field), which no public API sets."""

    field: int
    initial: dataclasses.InitVar[int]


_MARKED = _Marked.__dataclass_fields__
# What a table entry takes from the field it describes (Field's public attributes).
_FIELD_PARTS = (
    "default",
    "default_factory",
    "init",
    "repr",
    "hash",
    "compare",
    "metadata",
    "kw_only",
)


def _table_entry(name: str, annotation: object, value: object, initvar: bool) -> Field[Any]:
    """The entry ``dataclasses`` keeps for one field (what ``fields``/``replace`` read): a
    copy of one of _Marked's entries (its mark included), with this field's parts."""
    given: Field[Any] = value if isinstance(value, Field) else field(default=cast(Any, value))
    entry: Field[Any] = copy.copy(_MARKED["initial" if initvar else "field"])
    for part in _FIELD_PARTS:
        setattr(entry, part, getattr(given, part))
    entry.name = name
    entry.type = annotation
    return entry


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of the value ``obj`` with ``changes`` (field name -> new value) applied."""
    state = obj.__dict__
    names: tuple[str, ...] = getattr(type(obj), "__frozen_fields__", ())
    for name in changes:
        if name not in names:
            raise TypeError(f"{type(obj).__qualname__} has no field {name!r}")
    copy = object.__new__(type(obj))
    copy.__dict__.update(state)
    copy.__dict__.update(changes)
    return copy
