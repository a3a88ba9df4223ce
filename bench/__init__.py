"""Benchmarks: figures, not pass/fail tests (see bench/README.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def prepare_environment() -> None:
    """Make `bench` and `devtools` importable (also in spawned workers) and AWS hermetic:
    dummy credentials, a fixed region and no endpoint override, profile or instance
    metadata, so nothing a benchmark runs can reach, or wait for, a real account."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    for key in [k for k in os.environ if k.startswith("AWS_ENDPOINT_URL")]:
        del os.environ[key]
    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        os.environ.pop(key, None)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
