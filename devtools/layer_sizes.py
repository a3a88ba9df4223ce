"""What a built layer weighs: its files unzipped, and zipped as `sam package` uploads it.

One definition for the layer-size tests (tests/sam/test_build.py) and the bench that records
the sizes the docs quote (bench/layer_sizes.py), so the figure checked and the figure quoted
are measured alike.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path


def tree_size(path: Path) -> int:
    """Bytes of every file below ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def zipped_size(path: Path) -> int:
    """The size of ``path``'s files in a deflated zip, as `sam package` uploads a layer."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(f for f in path.rglob("*") if f.is_file()):
            archive.write(file, file.relative_to(path))
    return buffer.tell()
