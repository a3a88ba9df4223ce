"""Import the example Lambda functions (functions/<name>/app.py) the way Lambda does.

Every function calls its file ``app.py``, so they cannot share one import name: each is
imported as ``fleetbreaker_functions.<name>``, once per process, and its module-level code runs
then (the payment function builds its handler from ``os.environ`` at import, as in Lambda).
In Lambda ``payments.py`` sits beside ``app.py`` (the functions' Makefiles copy it); here
functions/shared goes on ``sys.path`` instead.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from devtools.servers import REPO_ROOT

FUNCTIONS_DIR = REPO_ROOT / "functions"
SHARED_DIR = FUNCTIONS_DIR / "shared"


def load_function(name: str) -> ModuleType:
    """``functions/<name>/app.py`` as module ``fleetbreaker_functions.<name>`` (imported once).

    A failed import leaves nothing behind, so the next call imports the file again (for
    example after a test fixed the environment).
    """
    module_name = f"fleetbreaker_functions.{name}"
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    if str(SHARED_DIR) not in sys.path:
        sys.path.insert(0, str(SHARED_DIR))
    path = FUNCTIONS_DIR / name / "app.py"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: dataclasses look their module up in sys.modules.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
