"""Every template the repository ships that asks more than one question groups and labels
its parameters.

`AWS::CloudFormation::Interface` is what the CloudFormation console and the Serverless
Application Repository show a user; `sam deploy --guided` shows neither and asks in the order
of `Parameters`, so template.yaml lists its parameters in the order of its groups. The
README's attach snippet asks one question (the layer's SSM parameter), which no group helps.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.sam_template import parse_template
from tests.sam.conftest import shipped_templates


def parsed_parameters(text: str) -> dict[str, Any]:
    parameters: dict[str, Any] = parse_template(text).get("Parameters", {})
    return parameters


TEMPLATES = {
    where: text for where, text in shipped_templates().items() if len(parsed_parameters(text)) > 1
}


def test_the_docs_ship_templates_beside_template_yaml() -> None:
    # The Managed Instances snippet at least (the README's attach snippet asks one question).
    shipped = shipped_templates()
    assert len(shipped) >= 3, sorted(shipped)
    assert len(TEMPLATES) >= 2, sorted(TEMPLATES)


@pytest.mark.parametrize("where", sorted(TEMPLATES))
def test_every_parameter_is_in_one_group_and_labelled(where: str) -> None:
    # GIVEN a shipped template WHEN its interface is read
    template = parse_template(TEMPLATES[where])
    parameters = list(template.get("Parameters", {}))
    assert parameters, where
    interface = template["Metadata"]["AWS::CloudFormation::Interface"]
    grouped = [name for group in interface["ParameterGroups"] for name in group["Parameters"]]

    # THEN each parameter is in exactly one group, every group has a label, and each
    # parameter a label of its own
    assert sorted(grouped) == sorted(parameters), where
    assert all(group["Label"]["default"].strip() for group in interface["ParameterGroups"])
    labels = interface["ParameterLabels"]
    assert set(labels) == set(parameters), where
    assert all(label["default"].strip() for label in labels.values())
    assert len({label["default"] for label in labels.values()}) == len(labels), "a label twice"


def test_sam_deploy_guided_asks_in_the_order_of_the_groups() -> None:
    # GIVEN template.yaml WHEN its parameters are compared with its groups THEN they come in
    # the groups' order, the core's first and the local-only endpoint last
    template = parse_template(TEMPLATES["template.yaml"])
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [name for group in groups for name in group["Parameters"]]
    assert list(template["Parameters"]) == grouped
    assert grouped[0] == "DeployExample"
    assert grouped[-1] == "LocalEndpointUrl"
