"""template.yaml as the tests and scripts read it: one loader, so every reader sees one form."""

from __future__ import annotations

from typing import Any

from devtools.servers import REPO_ROOT

TEMPLATE = REPO_ROOT / "template.yaml"


def load_template() -> dict[str, Any]:
    """template.yaml with its short-form intrinsics (!Ref, !GetAtt) as their long forms."""
    from samcli.yamlhelper import yaml_parse

    template: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return template
