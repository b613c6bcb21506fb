"""Make the example scripts importable by name (``import gemm_cpu``) for these tests.

The examples live in ``examples/`` as standalone scripts, not in a package. Putting that folder
on ``sys.path`` (instead of loading the files under a made-up name) keeps their factories
importable by reference in worker processes, which inherit ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

if str(EXAMPLES_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLES_DIR))
