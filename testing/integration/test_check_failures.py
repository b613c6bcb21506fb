"""A program of the user's that kills the run worker is blamed, not the config it ran for.

``manual_check_prog``, a ``ref_prog`` that takes the results, and the hooks run in the run
worker with the configs' kernels: one that crashes or hangs stops the tuning with an error
naming it (it used to be the config's ``crash`` or ``timeout``: the default config failed, and
the other configs, compared with nothing, passed however wrong). A worker that dies with a
message (a kernel calling a symbol no library has) quotes it in the trial's error.
"""

from __future__ import annotations

import faulthandler
import inspect
import os
import threading

import pytest
import torch

import tileauto
import tileauto.language as T
from tileauto import TrialStatus
from tileauto.errors import TileautoError

N = 256
WRONG_SPACE = [{"scale": 3}, {"scale": 4}]  # the default is scale=2: both others are wrong


@tileauto.jit(out_idx=[-1], target="llvm")
def scaled(n, scale=2):
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i] * T.float32(scale)

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def doubled(n, copy=0):
    """B = A * 2 whatever ``copy`` is: every config passes."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i] * T.float32(2) + T.float32(copy - copy)

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def calling(n, fn="none"):
    """B = A * 2, or B = fn(A) through a C symbol of that name (none exists but "none")."""
    if fn == "none":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n):
                B[i] = A[i] * T.float32(2)

        return main

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = T.call_extern("float32", fn, A[i])

    return main


def abort() -> None:
    """A bug in the user's program, or in a native library it calls."""
    faulthandler.disable()  # pytest's, in a run worker forked from it: its report is noise
    os.abort()


def aborting_check(results, expected):
    abort()


def aborting_checker(A, B):  # a ref_prog taking the results: it checks them
    abort()


def aborting_hook(named, exception=None):
    # to the descriptor, where the worker's log is (sys.stderr is pytest's in a forked worker)
    os.write(2, b"post_hook was here\n")
    abort()


def aborting_when_retimed(named, exception=None):
    """A hook that fails only on later calls (here: those of the interleaved re-timing)."""
    if any(f.function == "retime" and "run/worker.py" in f.filename for f in inspect.stack()):
        os.write(2, b"pre_hook gave up\n")
        abort()


def hanging_check(results, expected):
    threading.Event().wait()


def close_enough(results, expected):
    return all(torch.allclose(r, e) for r, e in zip(results, expected))


def stopped(kernel, space, **profile) -> str:
    """The error that stopped a tuning of ``space`` with these profile arguments."""
    tuner = tileauto.AutoTuner.from_kernel(kernel, space)
    with pytest.raises(TileautoError) as info:
        tuner.set_profile_args(warmup=1, rep=2, **profile).run(verbose=False)
    return str(info.value)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("program", "arguments", "said"),
    [
        ("manual_check_prog", {"manual_check_prog": aborting_check}, ""),
        ("ref_prog", {"ref_prog": aborting_checker}, ""),
        (
            "post_hook",
            {"post_hook": aborting_hook, "ref_prog": lambda a: a * 2},
            "; its last output: post_hook was here",
        ),
    ],
)
def test_a_program_that_crashes_the_run_worker_stops_the_tuning_naming_it(program, arguments, said):
    message = stopped(scaled(N), WRONG_SPACE, timeout=30, **arguments)
    assert message.startswith(
        f"{program} crashed the run worker (signal SIGABRT) on config {{'scale': 2}}; "
    ), message
    assert "no config passes unchecked" in message and f"fix {program}{said}" in message
    assert "(worker output: " in message


@pytest.mark.timeout(240)
def test_a_hook_that_crashes_the_re_timing_stops_the_tuning_naming_it():
    """Not the contenders' failure: each would crash alone too, and a hook that kills every
    re-timing would fail every contender and leave the slowest config the winner."""
    space = [{"copy": c} for c in range(3)]  # all right: both others contend
    message = stopped(doubled(N), space, timeout=30, pre_hook=aborting_when_retimed)
    assert message.startswith(
        "pre_hook crashed the run worker (signal SIGABRT) while re-timing configs ["
    ), message
    assert "no config passes unchecked" in message
    assert "fix pre_hook; its last output: pre_hook gave up" in message


@pytest.mark.timeout(240)
def test_a_check_program_that_hangs_stops_the_tuning_naming_it():
    message = stopped(scaled(N), WRONG_SPACE, timeout=3, manual_check_prog=hanging_check)
    assert message.startswith(
        "manual_check_prog did not return within the tuning's timeout of 3 s (on config "
        "{'scale': 2}) and the run worker was killed;"
    ), message


@pytest.mark.timeout(240)
def test_a_worker_that_dies_with_a_message_quotes_it_in_the_configs_error():
    """The loader's "undefined symbol" (exit code 127) was only in the worker's log, which every
    run of the process shares; a check program in the same runs is not blamed for it."""
    result = (
        tileauto.AutoTuner.from_kernel(calling(64), [{"fn": "none"}, {"fn": "my_fast_exp"}])
        .set_profile_args(warmup=1, rep=2, manual_check_prog=close_enough)
        .run(verbose=False)
    )
    trial = result.trials[1]
    assert trial.status is TrialStatus.CRASH, trial
    assert trial.error.startswith("worker exited with code 127; its last output: "), trial.error
    assert "undefined symbol: my_fast_exp (worker output: " in trial.error, trial.error
    assert result.config == {"fn": "none"}
