"""A space with every kind of bad config: the run survives, reports each reason, picks the best."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch

import tileauto
from tileauto import TrialStatus
from tileauto.errors import SettingsError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

MIXED_SPACE = [
    {"vec": 4},
    {"mode": "compile"},
    {"mode": "wrong"},
    {"mode": "partial"},
    {"mode": "spill"},
    {"mode": "segfault"},
    {"mode": "hang"},
    {"vec": 16},
    {"mode": "slow", "repeat": 64},
]

EXPECTED = {
    1: TrialStatus.COMPILE_ERROR,
    2: TrialStatus.MISMATCH,
    3: TrialStatus.MISMATCH,
    4: TrialStatus.OUT_OF_BOUNDS,
    5: TrialStatus.CRASH,
    6: TrialStatus.TIMEOUT,
}


def scripted_latency(func, args, *, warmup, rep, config, device):
    """Valid configs get a latency known in advance: vec=16 wins, the slow mode loses."""
    ms = {4: 3.0, 8: 2.0, 16: 1.0}[config["vec"]] * (5 if config["mode"] == "slow" else 1)
    func(*args)
    return [ms * 1e6] * rep


@pytest.mark.timeout(240)
def test_every_failure_is_reported_and_the_fastest_valid_config_wins():
    from tune_kernels import scale_jit

    start = time.monotonic()
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(4096), MIXED_SPACE)
        .set_profile_args(warmup=1, rep=5, timeout=5, timer=scripted_latency)
        .run(verbose=False)
    )
    elapsed = time.monotonic() - start
    assert elapsed < 180, f"tuning took {elapsed:.0f} s"
    assert len(result.trials) == len(MIXED_SPACE)
    assert [t.index for t in result.trials] == list(range(len(MIXED_SPACE)))
    for index, status in EXPECTED.items():
        assert result.trials[index].status is status, result.trials[index]
        assert result.trials[index].error
    assert "deliberate compile failure" in result.trials[1].error
    assert "unwritten output:" in result.trials[3].error
    assert "B" in result.trials[4].error
    assert "SIGSEGV" in result.trials[5].error
    assert "timed out after 5 s" in result.trials[6].error
    assert result.trials[0].ok and result.trials[7].ok and result.trials[8].ok
    assert result.config == {"mode": "ok", "repeat": 1, "vec": 16}
    assert result.latency == pytest.approx(1.0)
    assert result.default_trial is not None and result.default_trial.ok
    assert result.speedup == pytest.approx(2.0)
    a = torch.randn(4096)
    torch.testing.assert_close(result.kernel(a), a * 2)


@pytest.mark.timeout(120)
def test_no_config_passing_lists_every_reason():
    from tune_kernels import scale_jit

    space = [{"mode": "compile"}, {"mode": "wrong"}]
    with pytest.raises(tileauto.NoValidConfigError) as info:
        tileauto.AutoTuner.from_kernel(scale_jit(1024), space).set_profile_args(
            warmup=1, rep=3, ref_prog=lambda a: a * 2
        ).run(verbose=False)
    message = str(info.value)
    assert "none of the 2 configs passed" in message
    assert "[0] mode=compile" in message and "compile_error" in message
    assert "[1] mode=wrong" in message and "mismatch" in message
    assert len(info.value.trials) == 2


_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    import tileauto
    from tune_kernels import scale_jit
    space = [{{"vec": 4}}, {{"mode": "segfault"}}, {{"mode": "hang"}}, {{"vec": 16}}]
    print("tuning", flush=True)
    tileauto.AutoTuner.from_kernel(scale_jit(4096), space).set_profile_args(
        warmup=1, rep=3, timeout={timeout}).run(verbose=False)
    print("done", flush=True)
    """
)


def _marked(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TILEAUTO_TEST_MARK") == mark:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _run_child(timeout: float) -> tuple[int, str, str]:
    mark = uuid.uuid4().hex
    env = {
        **os.environ,
        "TILEAUTO_TEST_MARK": mark,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(here=str(HERE), timeout=timeout)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=200)
    deadline = time.monotonic() + 10
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _marked(mark)
    assert not left, f"processes survived: {[(p.pid, p.cmdline()) for p in left]}"
    return proc.returncode, out, err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_config_whose_kernel_does_not_fit_the_given_inputs_fails_alone():
    # the inputs given fit the default config; a padded config's kernel takes more elements:
    # it fails with why, the others are measured (the inputs' check must not stop the tuning)
    from tune_kernels import scale_jit

    tuner = tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"mode": "padded"}])
    with tileauto.set_autotune_inputs(torch.rand(256)):
        result = tuner.set_profile_args(warmup=0, rep=2, ref_prog=lambda a: a * 2).run(
            verbose=False
        )
    ok, padded = result.trials
    assert ok.ok and result.config == {"vec": 4, "mode": "ok"}
    assert padded.status is TrialStatus.RUN_ERROR
    assert "its inputs do not fit: set_autotune_inputs: input 0 (A) has shape (256,)" in (
        padded.error or ""
    )


def test_no_process_survives_a_run_with_crashes_and_hangs():
    code, out, err = _run_child(timeout=3)
    assert code == 0, err[-2000:]
    assert "done" in out


# Ctrl-C and SIGTERM at every phase of a tuning: testing/integration/test_interrupts.py


def test_a_factory_that_exits_or_raises_keyboardinterrupt_fails_its_config_only():
    """In a compile worker both are the config's failure, named by type; the others tune (a
    bare KeyboardInterrupt, whose message is empty, made the whole tuning raise IndexError)."""
    from tune_kernels import scale_jit

    space = [{"vec": 4}, {"mode": "interrupt"}, {"mode": "exit"}, {"vec": 16}]
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(4096), space)
        .set_profile_args(warmup=1, rep=3, timeout=60)
        .run(verbose=False)
    )
    statuses = [t.status for t in result.trials]
    assert statuses == [
        TrialStatus.OK,
        TrialStatus.COMPILE_ERROR,
        TrialStatus.COMPILE_ERROR,
        TrialStatus.OK,
    ], result.trials
    assert [t.error for t in result.trials[1:3]] == ["KeyboardInterrupt", "SystemExit: 3"]
    assert result.config["vec"] in (4, 16)


def test_a_run_memory_limit_above_the_machines_memory_stops_the_tuning_before_it_starts(
    monkeypatch,
):
    from tune_kernels import scale_jit

    total_mb = psutil.virtual_memory().total // 2**20
    monkeypatch.setenv("TILEAUTO_RUN_MEMORY_LIMIT_MB", str(4 * total_mb))
    kernel = scale_jit(4096)
    compiles = scale_jit.compile_count
    with pytest.raises(SettingsError, match=f"TILEAUTO_RUN_MEMORY_LIMIT_MB={4 * total_mb}: more"):
        tileauto.AutoTuner.from_kernel(kernel, [{"vec": 4}, {"vec": 16}]).run(verbose=False)
    assert scale_jit.compile_count == compiles  # nothing was compiled for it


@pytest.mark.timeout(180)
def test_a_config_exhausting_memory_is_reported_and_the_worker_replaced(monkeypatch):
    from tune_kernels import scale_jit

    monkeypatch.setenv("TILEAUTO_RUN_MEMORY_LIMIT_MB", "1500")
    space = [{"vec": 4}, {"mode": "hog"}, {"vec": 16}]
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(4096), space)
        .set_profile_args(warmup=1, rep=3, timeout=60)
        .run(verbose=False)
    )
    assert [t.status for t in result.trials] == [
        TrialStatus.OK,
        TrialStatus.OUT_OF_MEMORY,
        TrialStatus.OK,
    ]
    assert "more than 1.5 GiB" in result.trials[1].error


@pytest.mark.timeout(240)
def test_after_a_crash_the_new_run_worker_makes_its_reference_on_its_own_inputs():
    """A ``supply_prog`` need not make the same inputs twice (numpy's ``default_rng()`` draws
    from the OS): the run worker that replaces a crashed one makes new inputs, and the correct
    configs after the crash are checked against the default config run again on those, not
    against its outputs on the first worker's inputs (they all failed as mismatches)."""
    import numpy as np
    from tune_kernels import scale_jit

    def unseeded(params):
        rng = np.random.default_rng()
        return [torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32)) for p in params]

    result = (
        tileauto.AutoTuner.from_kernel(
            scale_jit(4096), [{"vec": 4}, {"mode": "segfault"}, {"vec": 16}]
        )
        .set_profile_args(warmup=1, rep=3, supply_prog=unseeded, timer=scripted_latency)
        .run(verbose=False)
    )
    statuses = [(t.status, t.error) for t in result.trials]
    assert [s for s, _ in statuses] == [TrialStatus.OK, TrialStatus.CRASH, TrialStatus.OK], statuses
    assert result.config["vec"] == 16


def test_a_timer_answering_nan_inf_or_a_negative_time_fails_its_config_only():
    """Before, a NaN or inf sample ended the tuning with an AttributeError out of
    ``statistics.stdev``, and a negative one won; a median of 0 ms (a CUDA event's resolution)
    made every table raise ZeroDivisionError (the console's silently, `result.table()` and
    `cache show` with a traceback)."""
    from tune_kernels import scale_jit

    answers = {4: [float("nan")], 8: [float("inf")], 16: [-5000.0], 2: [0.0]}

    def timer(func, args, *, warmup, rep, config, device):
        func(*args)
        return answers[config["vec"]] * rep

    configs = [{"vec": v} for v in (4, 8, 16, 2)]
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(4096), configs)
        .set_profile_args(warmup=1, rep=3, timer=timer, retime_top_k=0)
        .run(verbose=False)
    )
    by_vec = {t.config["vec"]: t for t in result.trials}
    for vec, kind in [(4, "non-finite"), (8, "non-finite"), (16, "negative")]:
        assert by_vec[vec].status is TrialStatus.RUN_ERROR, by_vec[vec]
        assert f"the timer returned a {kind} sample" in by_vec[vec].error
    assert by_vec[2].ok and result.config["vec"] == 2 and result.latency == 0.0
    table = result.table()
    assert "non-finite sample" in table and "negative sample" in table
