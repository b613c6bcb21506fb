"""``bench/par_compile.py --quick`` runs (a smoke test): the three ways, and their compile counts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# against a hang only: a quick run takes a minute or so on 2 idle cores, and many times that
# beside other jobs (the shared machines run at load 5-10)
GUARD_S = 1200
pytestmark = [pytest.mark.slow, pytest.mark.timeout(GUARD_S + 120)]


def test_quick_run_prints_the_three_ways():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "par_compile.py"), "--quick", "--workers", "1"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    # the script itself stops when a way compiles more (or, again, anything) than it should
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    for way in ("one by one", "par_compile", "again"):
        assert re.search(rf"^\s+{way}:\s+\d+\.\d+ s\s+\d+\.\dx", proc.stdout, re.M), proc.stdout


def test_workers_are_checked_against_the_cores():
    cores = len(os.sched_getaffinity(0))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "par_compile.py"), "--workers", str(cores + 1)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and f"--workers must be in [1, {cores}]" in proc.stderr
