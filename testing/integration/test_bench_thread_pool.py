"""``bench/thread_pool.py --quick`` measures every cell, and never leaves a busy process behind.

Timings are not asserted (the machine may be shared): only that every figure is there and
positive, and that the load the bench starts is stopped, at the end and on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "thread_pool.py"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _busy_of(pid: int) -> list[psutil.Process]:
    """The busy processes (``bench/thread_pool.py``'s load) that ``pid`` started."""
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [p for p in children if "getppid() == p" in " ".join(_cmdline(p))]


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _orphans() -> list[psutil.Process]:
    """Busy processes of this bench whose bench is gone (a live bench's own are not orphans)."""
    out = []
    for proc in psutil.process_iter():
        if "getppid() == p" not in " ".join(_cmdline(proc)):
            continue
        try:
            parent = proc.parent()
            alive = parent is not None and str(BENCH) in " ".join(_cmdline(parent))
        except psutil.NoSuchProcess:
            continue
        if not alive:
            out.append(proc)
    return out


# The quick run starts 30 fresh processes (each imports torch and TVM) beside 0 to 2 busy
# ones: about 25 s on 2 idle cores, 89 s beside one other busy process, past 240 s in a
# test suite beside another job. Its limit is against a hang only.
QUICK_GUARD_S = 1500


@pytest.mark.timeout(QUICK_GUARD_S + 120)
def test_quick_run_writes_every_cell(tmp_path):
    json_path = tmp_path / "thread_pool.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--spins", "tileauto", "default", "0", "auto"]
        + ["3000"]
        + ["--json", str(json_path)],
        cwd=tmp_path,
        # its scratch folder under tmp_path: a run killed at the guard cannot remove it
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=QUICK_GUARD_S,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    figures = json.loads(json_path.read_text())
    assert figures["quick"] is True
    assert figures["sizes"] == [256] and figures["loads"] == [0, 1, 2]
    n = figures["tuned_threads"]
    assert n >= 1
    spins = ["default", "tileauto", "0", "auto", "3000"]
    assert figures["spins"] == spins
    cells = {f"{spin}/{t}" for spin in spins for t in (1, n)}
    rows = {(r["load"], r["size"]): r for r in figures["rows"]}
    assert set(rows) == {(load, 256) for load in (0, 1, 2)}
    for row in rows.values():
        assert set(row["cells"]) == cells
        for cell in row["cells"].values():
            for key in ("median_ms", "mean_ms", "p20_ms", "p80_ms"):
                assert cell[key] > 0, (row["load"], cell)
            assert cell["process_medians_ms"] and all(x > 0 for x in cell["process_medians_ms"])
        for stat in ("median", "mean"):
            got = row[stat]
            assert got["best"] in cells
            assert got["spin0_vs_default"] > 0 and got["default_vs_best"] >= 1.0
            assert set(got["vs_default"]) == set(spins)
            assert got["vs_default"]["default"] == 1.0
            assert min(got["vs_best"].values()) == 1.0
    for stat in ("median", "mean"):
        assert set(figures["verdicts"][stat]["loads"]) == {"0", "1", "2"}
        assert figures["verdicts"][stat]["overall"]["best"] in cells
    for load in ("0", "1", "2"):
        assert f"verdict (median), load {load} " in out
        assert figures["load_average"][load]["during_max"] >= 0
    assert "median ms per call" in out and "mean ms per call" in out
    # "auto" is what a user gets: the busy-machine rule turns the spin off where the busy
    # processes (always runnable) and the pool's threads are more than the CPUs
    cpus = os.cpu_count() or 1
    for load in (0, 1, 2):
        chosen = figures["auto_spin"][str(load)]
        assert len(chosen) == 1 and chosen[0] in (None, "0"), chosen
        if load + n > cpus:
            assert chosen == ["0"], (load, n, cpus)
    assert not _orphans()


@pytest.mark.parametrize("spins", [["0", "3000"], ["default", "-1"], ["default", "fast"]])
def test_spins_must_be_default_and_counts(tmp_path, spins):
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--spins", *spins],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "--spins: expected 'default', optionally 'tileauto' and 'auto', and spin" in proc.stderr


def test_ctrl_c_stops_the_busy_processes(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(BENCH), "--quick", "--loads", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not ignored
    )
    try:
        deadline = time.monotonic() + 180  # tuning first, then the load block starts
        busy: list[psutil.Process] = []
        while len(busy) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            busy = _busy_of(proc.pid)
        assert len(busy) == 2, "the load block never started"
        children = psutil.Process(proc.pid).children(recursive=True)
        # Ctrl-C to the bench alone (a terminal sends it to all): it must stop the rest itself
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    assert "interrupted" in out, out
    _, alive = psutil.wait_procs(children, timeout=30)  # the load and the timing process
    assert not alive, alive
    assert not _orphans()
