"""docs/architecture.md draws the import contracts of pyproject.toml: the two never drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_architecture_diagram_is_drawn_from_the_import_contracts():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "architecture.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
