"""The busy-machine rule: TVM's pool does not spin when other threads want the cores.

The rule reads how many threads are runnable on the machine (``/proc/loadavg``) once per
process, before tileauto starts a pool; the decision is what TVM reads when its first pool
thread starts (``TVM_THREAD_POOL_SPIN_COUNT``). Most tests give it a scripted probe; the one
that uses the real count starts busy processes that are runnable for certain (each says so
before the count is read), so it cannot depend on the machine's own load.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tileauto.jit import thread_pool as cpu_pool
from tileauto.jit.thread_pool import SPIN_VAR, decide_spin, other_runnable_threads, runnable_threads
from tileauto.run.runner import Runner


@pytest.fixture(autouse=True)
def _fresh_rule(monkeypatch):
    monkeypatch.delenv(SPIN_VAR, raising=False)
    cpu_pool._forget()
    yield
    cpu_pool._forget()


def _never() -> int:
    raise AssertionError("the probe must not run")


def test_the_runnable_count_is_read_from_loadavg():
    assert runnable_threads(lambda: "0.52 0.40 0.31 3/81 1234\n") == 3
    assert runnable_threads(lambda: "garbage") is None

    def missing() -> str:
        raise FileNotFoundError("/proc/loadavg")

    assert runnable_threads(missing) is None
    assert other_runnable_threads(read=missing) is None


def test_other_threads_are_the_median_of_the_reads_less_the_caller():
    reads = iter(["0 0 0 6/90 1", "0 0 0 1/90 1", "0 0 0 5/90 1", "0 0 0 5/90 1", "0 0 0 1/90 1"])
    assert other_runnable_threads(samples=5, interval_s=0, read=lambda: next(reads)) == 4
    assert other_runnable_threads(samples=1, interval_s=0, read=lambda: "0 0 0 0/90 1") == 0


def test_a_busy_machine_turns_the_spin_off_once_per_process():
    got = decide_spin(2, probe=lambda: 1, cpus=2)  # 1 other + 2 pool threads > 2 CPUs
    assert got.spin == "0" and got.source == "busy"
    assert (got.others, got.cpus, got.threads) == (1, 2, 2)
    assert os.environ[SPIN_VAR] == "0"
    assert "1 other threads were runnable" in got.describe() and f"{SPIN_VAR}=0" in got.describe()
    assert decide_spin(2, probe=_never, cpus=2) is got  # decided: the pool's spin is fixed


def test_a_quiet_machine_keeps_tvm_s_default_and_decides_once():
    got = decide_spin(2, probe=lambda: 0, cpus=2)
    assert got.spin is None and got.source == "quiet"
    assert SPIN_VAR not in os.environ
    assert decide_spin(2, probe=lambda: 5, cpus=2) is got  # a later load does not change it
    assert SPIN_VAR not in os.environ


def test_one_thread_on_a_machine_with_a_free_core_is_not_busy():
    assert decide_spin(1, probe=lambda: 1, cpus=2).source == "quiet"


@pytest.mark.parametrize("value", ["0", "300000", "1000"])
def test_a_spin_count_you_set_is_kept_and_the_machine_is_not_probed(monkeypatch, value):
    monkeypatch.setenv(SPIN_VAR, value)
    got = decide_spin(2, probe=_never, cpus=2)
    assert (got.spin, got.source) == (value, "set")
    assert os.environ[SPIN_VAR] == value


def test_no_runnable_count_keeps_tvm_s_default():
    got = decide_spin(2, probe=lambda: None, cpus=2)
    assert got.spin is None and got.source == "unknown"
    assert SPIN_VAR not in os.environ


def test_the_run_worker_gets_the_process_s_spin_setting(monkeypatch):
    monkeypatch.setenv(SPIN_VAR, "0")
    assert Runner.make_worker("cpu", 2).env[SPIN_VAR] == "0"
    assert SPIN_VAR not in Runner.make_worker("cuda", 2).env  # no CPU pool timed there
    monkeypatch.delenv(SPIN_VAR)
    assert SPIN_VAR not in Runner.make_worker("cpu", 2).env


@pytest.mark.skipif(runnable_threads() is None, reason="no /proc/loadavg on this system")
def test_real_busy_processes_are_seen_and_turn_the_spin_off():
    cpus = os.cpu_count() or 1
    spin = "import sys\nsys.stdout.write('x'); sys.stdout.flush()\nwhile True:\n    pass\n"
    busy = [
        subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE) for _ in range(cpus)
    ]
    try:
        for p in busy:
            assert p.stdout is not None and p.stdout.read(1) == b"x"  # it spins now
        # a spinning process is always runnable: the count has every one of them
        assert (other_runnable_threads() or 0) >= cpus
        got = decide_spin(1, cpus=cpus)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert got.source == "busy" and os.environ[SPIN_VAR] == "0"
