"""Contenders that fail only when re-timed, with a real run worker: a kernel that raises or
segfaults on a later call on the same buffers, a timer's NaN. Each is a failure, never the winner.

The kernels write into their input: ``X[1]`` counts the calls made on one copy of it. The first
timing makes 1 + 5 + 10 calls on its copy; the interleaved re-timing 10 rounds of 2 warm-up
calls and 1 timed call (30), and each config re-timed alone must make as many (it made 12).
"""

from __future__ import annotations

import faulthandler
import functools
import os
import time
from pathlib import Path

import pytest
import torch

import tileauto
import tileauto.language as T
from tileauto import AutoTuner, TrialStatus
from tileauto.tune._retime import FAILED_WHEN_RETIMED, RETIMED

N = 64


@tileauto.jit(target="llvm")
def raising(n, th=1000, w=1):
    """Raises (a failed ``T.Assert``) on its ``th``-th call on the same buffer; ``w`` slows it."""

    @T.prim_func
    def main(X: T.Buffer((n,), "float32")):
        X[1] = X[1] + T.float32(1)
        T.Assert(X[1] < T.float32(th), "raised on a later call")
        for _, i in T.grid(w, n - 2):
            X[i + 2] = X[i + 2] * T.float32(0.25)

    return main


@tileauto.jit(target="llvm")
def crashing(n, th=100000, w=1):
    """Segfaults (a write far out of bounds) on its call ``th`` + 1 on the same buffer."""

    @T.prim_func
    def main(X: T.Buffer((n,), "float32")):
        X[1] = X[1] + T.float32(1)
        if X[1] > T.float32(th):
            X[2000000000] = T.float32(1)
        for _, i in T.grid(w, n - 2):
            X[i + 2] = X[i + 2] * T.float32(0.25)

    return main


def _tune(kernel, configs, **profile):
    with tileauto.set_autotune_inputs(torch.zeros(N)):
        return (
            AutoTuner.from_kernel(kernel, configs)
            .set_profile_args(warmup_iters=5, rep_iters=10, **profile)
            .run(verbose=False)
        )


def _assert_failed_when_retimed(result, bad, status, *words):
    trials = {tuple(t.config.items()): t for t in result.trials}
    trial = trials[tuple(bad.items())]
    assert trial.status is status and trial.latency is None, trial
    assert (trial.error or "").startswith("when re-timed: "), trial.error
    assert all(w in trial.error for w in words), trial.error
    assert FAILED_WHEN_RETIMED in trial.notes
    assert result.config != bad
    # the others were re-timed again without it
    assert any(n.startswith(RETIMED) for n in result.best_trial.notes), result.best_trial


@pytest.mark.timeout(240)
def test_a_kernel_raising_when_retimed_is_a_run_error_and_never_the_winner():
    # th=22: 16 calls in its first timing pass; the 22nd raises, in the interleaved re-timing,
    # and again when re-timed alone (whose 12 calls never reached it: it won as ok, silently)
    bad = {"th": 22, "w": 1}
    configs = [{"th": 1000, "w": 50}, bad, {"th": 1001, "w": 50}]
    result = _tune(raising(N), configs)
    _assert_failed_when_retimed(result, bad, TrialStatus.RUN_ERROR, "raised on a later call")


@pytest.mark.timeout(240)
def test_a_kernel_crashing_on_a_later_call_is_found_when_retimed_alone():
    # th=18: the 19th call segfaults, in the interleaved re-timing; alone, in one round of 12
    # calls, it did not, and it won as ok with a warning (calling it segfaulted the caller)
    bad = {"th": 18, "w": 1}
    configs = [{"th": 100000, "w": 50}, bad, {"th": 100001, "w": 50}]
    result = _tune(crashing(N), configs)
    _assert_failed_when_retimed(result, bad, TrialStatus.CRASH, "SIGSEGV")


@tileauto.jit(out_idx=[-1], target="llvm")
def double(n, b=0):
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i] * T.float32(2) + T.float32(b * 0)

    return main


def nan_when_retimed(func, args, *, warmup, rep, config, device):
    """Times as a timer does; for b=2, a NaN in the re-timing's rounds (1 timed run each)."""
    for _ in range(warmup):
        func(*args)
    samples = []
    for _ in range(rep):
        start = time.perf_counter_ns()
        func(*args)
        samples.append(float(time.perf_counter_ns() - start))
    return [float("nan")] if config.get("b") == 2 and rep == 1 else samples


@pytest.mark.timeout(240)
def test_a_nan_sample_when_retimed_is_a_run_error_not_a_first_timing_kept():
    # b=2 kept its first timing, with no note, and was ranked against the re-timed others
    with tileauto.set_autotune_inputs(torch.randn(N)):
        result = (
            AutoTuner.from_kernel(double(N), [{"b": 1}, {"b": 2}, {"b": 3}])
            .set_profile_args(warmup_iters=2, rep_iters=10, timer=nan_when_retimed)
            .run(verbose=False)
        )
    _assert_failed_when_retimed(result, {"b": 2}, TrialStatus.RUN_ERROR, "non-finite", "nan")
    for t in result.trials:
        if t.config != {"b": 2}:
            assert t.ok and any(n.startswith(RETIMED) for n in t.notes), t


def logged_timer(log, func, args, *, warmup, rep, config, device):
    """Times as a timer does and logs each call; the first re-timing of a config in a worker
    that timed it before (the interleaved pass) kills the worker, once (``log`` + ".crashed")."""
    mine = f"{os.getpid()} {config['b']}"
    seen = Path(log).read_text().splitlines() if Path(log).exists() else []
    crashed = Path(log + ".crashed")
    if any(line.startswith(mine + " ") for line in seen) and not crashed.exists():
        crashed.touch()
        faulthandler.disable()
        os.abort()
    with open(log, "a") as f:
        f.write(f"{mine} {warmup} {rep}\n")
    samples = []
    for k in range(warmup + rep):
        start = time.perf_counter_ns()
        func(*args)
        if k >= warmup:
            samples.append(float(time.perf_counter_ns() - start))
    return samples


def slow_before_the_crash(log, named):
    """Each call takes 20 ms in the first worker, microseconds after: ``rep`` in ms makes 3
    timed calls there, thousands in a new worker that measured them again."""
    if not Path(log + ".crashed").exists():
        time.sleep(0.02)  # a cost, not a wait for anything


@pytest.mark.timeout(240)
def test_contenders_re_timed_alone_in_a_new_worker_make_their_first_timings_calls(tmp_path):
    """``rep`` in ms: a worker measures each config's calls before timing it. After the
    interleaved re-timing killed the worker, each contender re-timed alone in the new one made
    as many timed calls as its first timing (it measured them again there: other counts)."""
    log = str(tmp_path / "timer.log")
    warned = pytest.warns(RuntimeWarning, match="no config failed when re-timed alone")
    with warned, tileauto.set_autotune_inputs(torch.randn(N)):
        result = (
            AutoTuner.from_kernel(double(N), [{"b": 0}, {"b": 1}, {"b": 2}])
            .set_profile_args(
                warmup_iters=1,
                rep=60,
                timer=functools.partial(logged_timer, log),
                pre_hook=functools.partial(slow_before_the_crash, log),
            )
            .run(verbose=False)
        )
    assert all(t.ok for t in result.trials), result.trials
    first, alone = {}, {}
    for line in Path(log).read_text().splitlines():
        pid, b, _, rep = line.split()
        if b not in first:
            first[b] = (pid, int(rep))
        elif pid != first[b][0]:  # the new worker
            alone[b] = alone.get(b, 0) + int(rep)
    assert set(alone) == {"0", "1", "2"}, (first, alone)  # the default config is re-timed too
    assert alone == {b: rep for b, (_, rep) in first.items()}, (first, alone)
