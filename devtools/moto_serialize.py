"""moto's JSON responses (DynamoDB's) built without its search for each member's value under
other names where no other name can match.

moto 5.2 builds a response by walking the operation's output shape: for every member of
every structure it asks a value picker for the member's value, and the picker tries the
member's name under six alias rules and their snake_case forms, building a context object
and six alias objects each time. A DynamoDB item is a map of AttributeValue structures of
ten members each, one of them present: a GetItem of a breaker's record (about 170
attributes) made some 1,700 such searches, and serializing the answer was half of moto's
CPU for the request (6 ms of the 12 ms a read of a fleet trial took).

:func:`serialize_fast` gives moto's plain JSON serializer a quicker walk of a structure whose
value is a plain dict holding only member names, where a search can find nothing but the
member's own key: no name the picker tries for one member (before or after its own) is
another member's name or a dotted path, checked once per structure shape with the picker's
own rules. There each member's value is the dict's entry, and everything else (the member
order, the None rule, the member's own serializer, the path) is moto's. Any other value,
picker or serializer takes moto's walk. tests/infra/test_moto_serialize.py compares the
two walks' bodies on the shapes the suite's DynamoDB requests answer with.

Applied where moto's checks are made once (devtools/moto_validation.py): by the test suite
to moto in-process, and by the moto servers its fixtures start (``MotoServer(
validate_once=True)``).
"""

from __future__ import annotations

from typing import Any


def _fast_structure(structure: Any) -> Any:
    from moto.core.serialize import (
        DEFAULT_ALIAS_PROVIDERS,
        AttributePickerContext,
        JSONSerializer,
        XFormedAttributePicker,
    )

    # A structure shape -> whether its members read as dict entries (the shape is kept: an
    # id is only unique while its object lives).
    plain: dict[int, tuple[Any, bool]] = {}

    def members_read_plainly(serializer: Any, shape: Any) -> bool:
        members = shape.members
        for key, member in members.items():
            member.parent = shape  # as moto's walk sets it before it picks the value
            context = AttributePickerContext(
                obj={},
                key=key,
                shape=member,
                operation_model=serializer.operation_model,
                service_model=serializer.service_model,
            )
            for name in serializer._value_picker.get_possible_keys(context):
                if "." in name or (name != key and name in members):
                    return False
        return True

    def serialize(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> Any:
        picker = self._value_picker
        if (
            type(value) is not dict
            or type(self) is not JSONSerializer
            or type(picker) is not XFormedAttributePicker
            or picker.alias_providers is not DEFAULT_ALIAS_PROVIDERS
            or picker.response_transformers
            or shape.is_document_type
        ):
            return structure(self, serialized, value, shape, key)
        known = plain.get(id(shape))
        if known is None or known[0] is not shape:
            known = (shape, members_read_plainly(self, shape))
            plain[id(shape)] = known
        members = shape.members
        if not known[1] or not value.keys() <= members.keys():
            return structure(self, serialized, value, shape, key)
        wrapper = self.MAP_TYPE() if key else serialized
        for member_key, member_shape in members.items():
            member_shape.parent = shape
            member_value = value.get(member_key)
            if member_value is not None:
                self._serialize(wrapper, member_value, member_shape, member_key)
        if key:
            self._default_serialize(serialized, wrapper, shape, key)
        return None

    serialize.__wrapped__ = structure  # type: ignore[attr-defined]
    return serialize


def serialize_fast() -> None:
    """Patch moto's plain JSON serializer in this process (idempotent)."""
    from moto.core.serialize import BaseJSONSerializer, JSONSerializer

    if not hasattr(vars(JSONSerializer).get("_serialize_type_structure"), "__wrapped__"):
        JSONSerializer._serialize_type_structure = _fast_structure(  # type: ignore[method-assign]
            BaseJSONSerializer._serialize_type_structure
        )
