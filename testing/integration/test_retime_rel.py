"""Reliability with a real run worker: a kernel that crashes when re-timed, a worker killed from
outside (SIGTERM: measured again next time, not a remembered crash)."""

from __future__ import annotations

import ctypes
import functools
import os
import signal

import pytest

import tileauto
from tileauto.records import TRANSIENT, TrialStatus
from tileauto.workers.procs import Worker, WorkerCancelled, WorkerCrashed


def scale(block=16):
    from tvm import s_tir, te

    a = te.placeholder((256,), "float32", name="A")
    b = te.compute((256,), lambda i: a[i] * 2, name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, block])
    return sch.mod["main"]


def counting_timer(count_path, bad_block, sig, after, func, args, *, warmup, rep, config, device):
    """Latency ``block`` us; the ``bad_block`` config's process gets ``sig`` on its call number
    ``after`` + 1 (counted in a file: the run worker is another process)."""
    func(*args)
    if config["block"] == bad_block:
        with open(count_path, "a") as f:
            f.write("x")
        if os.path.getsize(count_path) > after:
            if sig == signal.SIGSEGV:  # a real one: a handler could ignore one sent with kill
                ctypes.string_at(0)
            os.kill(os.getpid(), sig)
    return [1000.0 * config["block"]] * 3


def tune(tmp_path, sig, after, configs=(4, 8, 32)):
    timer = functools.partial(counting_timer, str(tmp_path / "calls"), 4, sig, after)
    return (
        tileauto.AutoTuner.from_kernel(scale, [{"block": b} for b in configs])
        .set_compile_args(out_idx=[-1], target="llvm")
        .set_profile_args(warmup=1, rep=2, timeout=30, timer=timer)
        .run(verbose=False)
    )


@pytest.mark.timeout(240)
def test_a_kernel_crashing_when_retimed_is_a_crash_and_never_the_winner(tmp_path):
    # block=4 passes its check and first timing, then segfaults in the interleaved re-timing
    result = tune(tmp_path, signal.SIGSEGV, after=1)
    trials = {t.config["block"]: t for t in result.trials}
    assert trials[4].status is TrialStatus.CRASH
    assert "SIGSEGV" in (trials[4].error or "") and "re-timed" in trials[4].error
    assert any("failed when re-timed" in n for n in trials[4].notes)
    assert result.config == {"block": 8}
    assert trials[8].ok and any("re-timed interleaved" in n for n in trials[8].notes)


@pytest.mark.timeout(240)
def test_a_run_worker_killed_by_sigterm_from_outside_is_measured_again(tmp_path):
    # the run worker timing block=4 gets SIGTERM: not the config's doing
    result = tune(tmp_path, signal.SIGTERM, after=0)
    trial = {t.config["block"]: t for t in result.trials}[4]
    assert trial.status is TrialStatus.CANCELLED and trial.status in TRANSIENT
    assert result.config == {"block": 8}


def _die_by(sig: int) -> None:
    # a shell's background job starts with SIGINT and SIGQUIT ignored, and the worker inherits
    # that: the signal's own action, as an admin's kill meets it in a service
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


@pytest.mark.timeout(120)
# (SIGINT is not listed: a worker ignores it, a terminal's Ctrl-C is the tuning's to handle)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_worker_stopped_from_outside_is_cancelled_not_crashed(sig):
    worker = Worker("rel-test")
    try:
        with pytest.raises(WorkerCancelled) as got:
            worker.call(_die_by, sig, timeout_s=60)
        # still a dead worker for code that replaces crashed ones, and not out of memory
        assert isinstance(got.value, WorkerCrashed) and not got.value.out_of_memory
        assert got.value.signal_name == sig.name and "from outside" in str(got.value)
    finally:
        worker.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT])
def test_a_worker_killed_by_its_own_fault_is_a_crash(sig):
    worker = Worker("rel-test")
    try:
        with pytest.raises(WorkerCrashed) as got:
            worker.call(_die_by, sig, timeout_s=60)
        assert not isinstance(got.value, WorkerCancelled)
    finally:
        worker.close()
