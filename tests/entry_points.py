"""The project venv's own console script, so no test runs a `k2conform` from elsewhere on PATH."""

from __future__ import annotations

import sys
from pathlib import Path

#: ``k2conform`` beside the interpreter running the tests (the venv's bin/), never a PATH lookup.
K2CONFORM = str(Path(sys.executable).parent / "k2conform")
