"""A tuned CPU kernel runs with the thread count it was tuned with, in a fresh process too.

The tuner's run worker times with every core (the thread-count rule), on tileauto's thread pool
(``tileauto.jit.launcher``); the kernel returned, or loaded from the cache in a fresh process,
must run on the same pool with the same count. With ``TILEAUTO_THREAD_POOL=tvm`` it is TVM's
pool, which TVM sizes from ``TVM_NUM_THREADS`` (one thread on a 2-core x86 machine when unset).
These tests tune and call a row-parallel kernel in fresh processes (``threads_kernels.py``)
with no ``TVM_NUM_THREADS`` and check which pool ran the call and the thread count it runs
with, not a latency: a timed assertion would flake on a loaded machine, while the pool and its
size are exactly what decide whether the kernel runs as tuned (``bench/warm_start.py`` reports
the latency in a fresh process against the tuned one, with its target).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from busy import busy_machine

from tileauto.jit.thread_pool import runnable_threads
from tileauto.machine import available_cpus
from tileauto.options import ProfileArgs
from tileauto.settings import Settings

SCRIPT = Path(__file__).with_name("threads_kernels.py")


def _run(cache: Path, *args: str, **env: str) -> dict:
    unset = ("TVM_NUM_THREADS", "TVM_THREAD_POOL_SPIN_COUNT")
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    clean.update(TILEAUTO_CACHE_DIR=str(cache), **env)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tuned_kernel_runs_with_tuned_threads_in_a_fresh_process(tmp_path):
    tuned = _run(tmp_path, "2")
    assert not tuned["cache_hit"] and tuned["correct"]
    assert tuned["env_before"] is None
    assert tuned["kernel_threads"] == 2 and tuned["pool_threads"] == 2
    assert tuned["pool"] == "tileauto" and tuned["launches"] == 1
    # a fresh process finds the tuning in the cache and still runs with 2 threads, not TVM's default
    loaded = _run(tmp_path, "2")
    assert loaded["cache_hit"] and loaded["correct"]
    assert loaded["env_before"] is None
    assert loaded["kernel_threads"] == 2 and loaded["pool_threads"] == 2
    assert loaded["pool"] == "tileauto" and loaded["launches"] == 1


def test_tvm_pool_on_request_runs_with_tuned_threads(tmp_path):
    tuned = _run(tmp_path, "2", TILEAUTO_THREAD_POOL="tvm")
    loaded = _run(tmp_path, "2", TILEAUTO_THREAD_POOL="tvm")
    assert loaded["cache_hit"], "the pool is not part of the cache key"
    for got in (tuned, loaded):
        assert got["pool"] == "tvm" and got["launches"] == 0 and got["correct"]
        assert got["kernel_threads"] == 2 and got["pool_threads"] == 2


def test_default_is_every_core_and_the_thread_count_is_in_the_cache_key(tmp_path):
    default = _run(tmp_path)
    assert default["kernel_threads"] == available_cpus() == default["pool_threads"]
    one = _run(tmp_path, "1")
    if available_cpus() != 1:
        assert not one["cache_hit"], "a tuning with another thread count must not be reused"
    assert one["kernel_threads"] == 1 and one["pool_threads"] == 1


def test_callers_tvm_num_threads_is_respected(tmp_path):
    got = _run(tmp_path, TVM_NUM_THREADS="1")
    assert got["env_before"] == "1" and got["env_after"] == "1"
    assert got["kernel_threads"] == 1 and got["pool_threads"] == 1


def test_a_tvm_pool_started_early_does_not_matter_to_tileauto_pool(tmp_path):
    got = _run(tmp_path, "2", "--early-pool")
    assert got["pool"] == "tileauto" and got["correct"] and not got["warned"]
    assert got["kernel_threads"] == 2 and got["pool_threads"] == 2


def test_a_tvm_pool_started_too_small_is_reported(tmp_path):
    got = _run(tmp_path, "2", "--early-pool", TILEAUTO_THREAD_POOL="tvm")
    assert got["pool"] == "tvm" and got["kernel_threads"] == 2 and got["correct"]
    # TVM's default pool size depends on the machine: when it was smaller, a warning says so
    assert got["warned"] == (got["pool_threads"] != 2)


def test_thread_count_rule_in_settings(monkeypatch):
    assert Settings.from_env({}).run_threads() == available_cpus()
    monkeypatch.setattr("tileauto.machine.available_cpus", lambda: 8)  # the rule, on 8 CPUs
    assert Settings.from_env({"TVM_NUM_THREADS": "3"}).run_threads() == 3
    both = {"TVM_NUM_THREADS": "3", "TILEAUTO_NUM_THREADS": "5"}
    assert Settings.from_env(both).run_threads() == 5
    assert Settings.from_env(both).with_num_threads(7).run_threads() == 7
    assert Settings.from_env(both).with_num_threads(None).run_threads() == 5
    # TVM's variable is TVM's: a value TVM ignores is ignored, not an error
    assert Settings.from_env({"TVM_NUM_THREADS": "zero"}).run_threads() == 8


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_num_threads_option_is_checked(bad):
    with pytest.raises(ValueError, match="num_threads"):
        ProfileArgs(num_threads=bad)


needs_loadavg = pytest.mark.skipif(
    runnable_threads() is None, reason="no /proc/loadavg: the busy-machine rule cannot see load"
)


@needs_loadavg
def test_on_a_busy_machine_tvm_pool_does_not_spin_in_tuning_or_in_a_fresh_process(tmp_path):
    with busy_machine():
        tuned = _run(tmp_path, "2", TILEAUTO_THREAD_POOL="tvm")
        loaded = _run(tmp_path, "2", TILEAUTO_THREAD_POOL="tvm")
    for got in (tuned, loaded):
        assert got["correct"] and got["spin_before"] is None and got["pool"] == "tvm"
        assert got["spin_rule"] == "busy" and got["spin_after"] == "0"
        assert got["kernel_threads"] == 2 and got["pool_threads"] == 2
    assert loaded["cache_hit"], "the spin setting is not part of the cache key"


@needs_loadavg
def test_on_a_busy_machine_tileauto_pool_runs_the_kernel_with_the_tuned_threads(tmp_path):
    with busy_machine():
        tuned = _run(tmp_path, "2")
        loaded = _run(tmp_path, "2")
    for got in (tuned, loaded):
        assert got["correct"] and got["pool"] == "tileauto" and got["launches"] == 1
        assert got["kernel_threads"] == 2 and got["pool_threads"] == 2
    # TVM's spin rule is for TVM's pool: a process that runs only tileauto's never applies it
    assert loaded["spin_rule"] is None and loaded["spin_after"] is None
    assert loaded["cache_hit"]


@needs_loadavg
def test_a_spin_count_you_set_is_kept_on_a_busy_machine(tmp_path):
    with busy_machine():
        got = _run(tmp_path, "2", TVM_THREAD_POOL_SPIN_COUNT="300000")
    assert got["spin_rule"] == "set" and got["spin_after"] == "300000" and got["correct"]
