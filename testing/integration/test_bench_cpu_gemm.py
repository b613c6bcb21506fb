"""``bench/cpu_gemm_search.py --quick`` runs every step (a smoke test: 17 configs, 128^3)."""

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


def test_quick_run_prints_every_figure(tmp_path):
    env = {**os.environ, "TILEAUTO_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cpu_gemm_search.py"), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "space: 17 configs" in out
    assert "block_M % micro_M == 0" in out  # the pruned counts, per rule
    # every config measured and none failed; auto stopped at max_trials, 10% of 17
    assert re.search(r"^exhaustive\s+17\s+0\s", out, re.M), out
    assert re.search(r"^auto seed 0\s+2\s+0\s", out, re.M), out
    assert re.search(r"auto seed 0: \d\.\d{3} (PASS|MISS)", out), out
