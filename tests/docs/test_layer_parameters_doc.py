"""docs/deploying.md compares the layers' SSM parameters with Powertools' public ones: what it
says differs (no architecture, no version, the stack's name, full and slim) is what
template.yaml names."""

from __future__ import annotations

import re

from devtools.sam_template import load_template
from devtools.servers import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "deploying.md"


def parameter_names() -> list[str]:
    """The Name of every SSM parameter the template declares, as its !Sub writes it."""
    names = []
    for resource in load_template()["Resources"].values():
        if resource.get("Type") == "AWS::SSM::Parameter":
            name = resource["Properties"]["Name"]
            names.append(name["Fn::Sub"] if isinstance(name, dict) else name)
    return names


def test_the_guide_names_powertools_public_parameters() -> None:
    text = " ".join(GUIDE.read_text().split())
    assert "`/aws/service/powertools/python/{arch}/{python_version}/{version|latest}`" in text
    assert "ours none, since the package is pure Python" in text


def test_the_layer_parameters_differ_from_powertools_as_the_guide_says() -> None:
    layers = [name for name in parameter_names() if re.search(r"/python3\.\d+/", name)]

    assert layers, "no per-runtime layer parameter found"
    for name in layers:
        # under the stack's name, not /aws/service/
        assert name.startswith("/${AWS::StackName}/fleetbreaker/")
        # no architecture and no version segment: runtime, then the layer
        assert re.fullmatch(
            r"/\$\{AWS::StackName\}/fleetbreaker/python3\.\d+/(slim-)?layer-arn", name
        )
    assert {name.rsplit("/", 1)[1] for name in layers} == {"layer-arn", "slim-layer-arn"}
