"""``python -m fleetbreaker.cli``: the ``fleetbreaker`` console script."""

from __future__ import annotations

import sys

from fleetbreaker.cli import main

if __name__ == "__main__":
    sys.exit(main())
