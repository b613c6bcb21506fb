"""For the key tests that edit a project and run it in a new process: the child's result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def child_result(code: str, cache: Path, *args: str) -> dict:
    """Run ``code`` in a new Python process with ``args`` and the cache folder ``cache`` (the
    kernel cache on, whatever the test's environment says); the JSON of its last line."""
    env = {k: v for k, v in os.environ.items() if k != "TILEAUTO_DISABLE_CACHE"}
    env["TILEAUTO_CACHE_DIR"] = str(cache)
    child = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])
