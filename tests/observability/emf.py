"""The CloudWatch Embedded Metric Format rules, written down as checks.

Transcribed from the published specification ("Specification: Embedded metric format",
Amazon CloudWatch User Guide) and the JSON schema printed in it. Each check quotes the rule it
enforces, so a failure names the rule a document broke.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Units the schema's MetricUnit pattern accepts.
CLOUDWATCH_UNITS = frozenset(
    {
        "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes",
        "Gigabytes", "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits",
        "Percent", "Count", "Bytes/Second", "Kilobytes/Second", "Megabytes/Second",
        "Gigabytes/Second", "Terabytes/Second", "Bits/Second", "Kilobits/Second",
        "Megabits/Second", "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
    }
)  # fmt: skip
MAX_DIMENSION_KEYS = 30
MAX_DIMENSION_VALUE_CHARS = 1024
MAX_DIMENSION_REFERENCE_CHARS = 250
MAX_METRIC_DEFINITIONS = 100
MAX_METRIC_VALUES = 100
MAX_NAMESPACE_CHARS = 1024
MAX_METRIC_NAME_CHARS = 1024
MAX_DOCUMENT_BYTES = 1024 * 1024


class EMFViolation(AssertionError):
    """A document broke a rule of the EMF specification."""


def _require(condition: bool, rule: str, detail: object = "") -> None:
    if not condition:
        raise EMFViolation(f"{rule}: {detail}" if detail != "" else rule)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_emf_line(line: str) -> dict[str, Any]:
    """Parse one log line as an EMF document and check every rule; return the document."""
    _require(
        len(line.encode("utf-8")) <= MAX_DOCUMENT_BYTES,
        "an EMF document is limited to 1 MB (a CloudWatch Logs event)",
    )
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EMFViolation(
            "the LogEvent message MUST be a valid JSON object with no additional data "
            "at the beginning or end"
        ) from exc
    _require(isinstance(doc, dict), "the root node MUST be a JSON object", type(doc).__name__)
    validate_emf(doc)
    return doc


def validate_emf(doc: dict[str, Any]) -> None:
    """Check a parsed document against the specification's rules."""
    _require("_aws" in doc, "documents MUST contain the top-level member _aws")
    meta = doc["_aws"]
    _require(isinstance(meta, dict), "the _aws value MUST be an object")
    _require("Timestamp" in meta, "_aws MUST contain Timestamp")
    timestamp = meta["Timestamp"]
    _require(
        isinstance(timestamp, int) and not isinstance(timestamp, bool),
        "Timestamp is an integer (schema type: integer)",
        repr(timestamp),
    )
    _require(timestamp > 10**12, "Timestamp is epoch milliseconds", timestamp)
    _require("CloudWatchMetrics" in meta, "_aws MUST contain CloudWatchMetrics")
    directives = meta["CloudWatchMetrics"]
    _require(isinstance(directives, list), "CloudWatchMetrics is an array of MetricDirective")
    for directive in directives:
        _validate_directive(doc, directive)


def _validate_directive(doc: dict[str, Any], directive: object) -> None:
    _require(isinstance(directive, dict), "a MetricDirective is an object")
    assert isinstance(directive, dict)
    for member in ("Namespace", "Dimensions", "Metrics"):
        _require(member in directive, f"a MetricDirective MUST contain {member}")
    namespace = directive["Namespace"]
    _require(
        isinstance(namespace, str) and 1 <= len(namespace) <= MAX_NAMESPACE_CHARS,
        "Namespace is a string of 1 to 1024 characters",
        repr(namespace),
    )
    dimension_sets = directive["Dimensions"]
    _require(
        isinstance(dimension_sets, list) and len(dimension_sets) >= 1,
        "Dimensions is an array of at least one DimensionSet (schema minItems 1)",
    )
    for dimension_set in dimension_sets:
        _require(isinstance(dimension_set, list), "a DimensionSet is an array of strings")
        _require(
            len(dimension_set) <= MAX_DIMENSION_KEYS,
            "a DimensionSet MUST NOT contain more than 30 dimension keys",
            len(dimension_set),
        )
        for key in dimension_set:
            _require(
                isinstance(key, str) and 1 <= len(key) <= MAX_DIMENSION_REFERENCE_CHARS,
                "a dimension reference is a string of 1 to 250 characters",
                repr(key),
            )
            _require(
                key in doc,
                "dimension keys MUST also be members on the root node (target members)",
                key,
            )
            value = doc[key]
            _require(isinstance(value, str), "a dimension target MUST have a string value", key)
            _require(
                len(value) <= MAX_DIMENSION_VALUE_CHARS,
                "a dimension value MUST NOT contain more than 1024 characters",
                key,
            )
    metrics = directive["Metrics"]
    _require(isinstance(metrics, list), "Metrics is an array of MetricDefinition")
    _require(
        len(metrics) <= MAX_METRIC_DEFINITIONS,
        "Metrics MUST NOT contain more than 100 MetricDefinition objects",
        len(metrics),
    )
    for definition in metrics:
        _require(isinstance(definition, dict), "a MetricDefinition is an object")
        _require("Name" in definition, "a MetricDefinition MUST contain Name")
        name = definition["Name"]
        _require(
            isinstance(name, str) and 1 <= len(name) <= MAX_METRIC_NAME_CHARS,
            "a metric Name is a string of 1 to 1024 characters",
            repr(name),
        )
        _require(name in doc, "the root node MUST contain every target member (metric)", name)
        if "Unit" in definition:
            _require(
                definition["Unit"] in CLOUDWATCH_UNITS,
                "Unit SHOULD be a valid CloudWatch unit",
                definition["Unit"],
            )
        if "StorageResolution" in definition:
            _require(
                definition["StorageResolution"] in (1, 60),
                "StorageResolution SHOULD be 1 or 60",
                definition["StorageResolution"],
            )
        value = doc[name]
        if isinstance(value, list):
            _require(
                len(value) <= MAX_METRIC_VALUES,
                "numeric array metric targets MUST NOT have more than 100 members",
                len(value),
            )
            _require(
                all(_is_number(v) for v in value),
                "a metric target MUST be a number or an array of numbers",
                name,
            )
        else:
            _require(
                _is_number(value), "a metric target MUST be a number or an array of numbers", name
            )


@dataclass(frozen=True)
class Datum:
    """One metric of one document, flattened for assertions."""

    namespace: str
    dimensions: tuple[tuple[str, str], ...]  # sorted (key, value) pairs of one DimensionSet
    name: str
    unit: str
    values: tuple[float, ...]

    @property
    def total(self) -> float:
        return sum(self.values)


def emf_documents(output: str) -> list[dict[str, Any]]:
    """Every EMF document among the lines of captured stdout, each one validated."""
    return [
        validate_emf_line(line)
        for line in output.splitlines()
        if line.startswith("{") and '"_aws"' in line
    ]


def data(documents: Iterable[dict[str, Any]]) -> list[Datum]:
    """Flatten documents into one Datum per (directive, dimension set, metric)."""
    out: list[Datum] = []
    for doc in documents:
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dims = tuple(sorted((key, doc[key]) for key in dimension_set))
                for definition in directive["Metrics"]:
                    value = doc[definition["Name"]]
                    values = tuple(value) if isinstance(value, list) else (value,)
                    out.append(
                        Datum(
                            directive["Namespace"],
                            dims,
                            definition["Name"],
                            definition.get("Unit", "None"),
                            values,
                        )
                    )
    return out
