"""What `sam package` and `sam publish` need: SAR metadata, a LICENSE, one version.

The version lives in ``fleetbreaker._version`` only (the package re-exports it as
``fleetbreaker.__version__``): pyproject.toml reads it from there (setuptools' dynamic
version) and template.yaml's SemanticVersion must equal it.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

import pytest
import tomllib

import fleetbreaker
from devtools.sam_template import load_template
from devtools.servers import REPO_ROOT

SAR = "AWS::ServerlessRepo::Application"
# What the Serverless Application Repository requires to publish (name, description, author)
# plus what this issue promised: license, readme, version and source.
REQUIRED = (
    "Name",
    "Description",
    "Author",
    "SpdxLicenseId",
    "LicenseUrl",
    "ReadmeUrl",
    "SemanticVersion",
    "SourceCodeUrl",
)


@pytest.fixture(scope="module")
def metadata() -> dict[str, Any]:
    application: dict[str, Any] = load_template()["Metadata"][SAR]
    return application


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return project


def test_the_application_metadata_is_complete(metadata: dict[str, Any]) -> None:
    missing = [field for field in REQUIRED if not str(metadata.get(field, "")).strip()]
    assert missing == []
    # SAR's own limits: name 1-140 characters of letters, digits and hyphens; description
    # at most 256 characters; at most 10 labels of at most 127 characters each.
    assert re.fullmatch(r"[A-Za-z0-9-]{1,140}", metadata["Name"])
    assert len(metadata["Description"]) <= 256
    assert len(metadata["Labels"]) <= 10
    assert all(re.fullmatch(r"[A-Za-z0-9+\-_:/@]{1,127}", label) for label in metadata["Labels"])
    assert metadata["SourceCodeUrl"].startswith("https://")


@pytest.mark.parametrize("field", ["LicenseUrl", "ReadmeUrl"])
def test_the_files_sam_package_uploads_exist(metadata: dict[str, Any], field: str) -> None:
    # sam package uploads these local paths to S3 and puts their addresses in the template
    assert (REPO_ROOT / metadata[field]).is_file()


def test_the_license_is_the_one_every_declaration_names(
    metadata: dict[str, Any], pyproject: dict[str, Any]
) -> None:
    # GIVEN the LICENSE file WHEN compared with the SPDX id in the template, the package's
    # metadata and the layers' LicenseInfo THEN all say MIT-0, and the file is its text
    text = (REPO_ROOT / "LICENSE").read_text()
    assert text.startswith("MIT No Attribution\n")
    assert "without restriction" in text
    assert "subject to the following conditions" not in text, "that is MIT, not MIT-0"
    assert metadata["SpdxLicenseId"] == "MIT-0"
    assert pyproject["project"]["license"] == "MIT-0"
    layers = [
        resource
        for resource in load_template()["Resources"].values()
        if resource["Type"] == "AWS::Serverless::LayerVersion"
    ]
    assert layers
    for layer in layers:
        assert layer["Properties"]["LicenseInfo"] == "MIT-0"


def test_the_version_is_kept_in_one_place(
    metadata: dict[str, Any], pyproject: dict[str, Any]
) -> None:
    # GIVEN the package's __version__ WHEN pyproject, the installed metadata and the
    # template are read THEN pyproject derives it and the others equal it
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "fleetbreaker._version.__version__"}
    assert importlib.metadata.version("fleetbreaker") == fleetbreaker.__version__
    assert metadata["SemanticVersion"] == fleetbreaker.__version__


def test_the_version_is_a_semantic_version() -> None:
    # SAR refuses anything but MAJOR.MINOR.PATCH
    assert re.fullmatch(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)", fleetbreaker.__version__)
