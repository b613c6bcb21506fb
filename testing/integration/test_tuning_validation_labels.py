"""``trial.validation`` in real tunings: what each config was checked against, no more.

A default config that leaves its output unwritten is no reference (none is kept): the other
configs are only checked for unwritten outputs, and say ``SKIPPED``, not ``DEFAULT``. A config
whose run ended before its check (a run error, a crash) says None, with a ``ref_prog`` too.
"""

from __future__ import annotations

import pytest
import torch
from tune_kernels import scale, scale_jit

import tileauto
from tileauto import AutoTuner, TrialStatus, Validation

QUICK = {"warmup_iters": 1, "rep_iters": 3}
NOT_CALLED = "manual_check_prog not called"


def partial_default(n: int, vec: int = 8, mode: str = "partial"):
    """``scale`` whose default config writes only the first half of its output."""
    return scale(n, vec, mode)


partial_default_jit = tileauto.jit(out_idx=[-1], target="llvm")(partial_default)


def tune(kernel, configs, **profile):
    seen = []
    result = (
        AutoTuner.from_kernel(kernel, configs)
        .set_profile_args(**QUICK, on_trial=seen.append, **profile)
        .run(verbose=False)
    )
    return result, {t.index: t for t in seen}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("manual", [False, True], ids=["tolerances", "manual_check_prog"])
def test_a_default_with_unwritten_outputs_is_no_reference_and_the_others_say_skipped(manual):
    profile = {"manual_check_prog": lambda r, e: True} if manual else {}
    result, seen = tune(partial_default_jit(256), [{"mode": "ok"}, {"mode": "wrong"}], **profile)
    default = seen[-1]
    assert default.status is TrialStatus.MISMATCH and "none is kept" in default.error
    assert default.validation is Validation.SKIPPED
    ok, wrong = seen[0], seen[1]
    # only unwritten outputs were checked: the wrong config passes (as documented) ...
    assert ok.status is wrong.status is TrialStatus.OK
    # ... and neither claims to have been compared with the default config's outputs
    assert ok.validation is wrong.validation is Validation.SKIPPED
    assert [t.validation for t in result.trials] == [Validation.SKIPPED] * 2
    assert all((NOT_CALLED in " ".join(t.notes)) is manual for t in (ok, wrong))


@pytest.mark.timeout(300)
def test_with_a_ref_prog_a_config_that_never_reached_the_check_was_validated_against_nothing():
    result, seen = tune(
        scale_jit(256),
        [{"vec": 4}, {"mode": "wrong"}, {"mode": "raise"}, {"mode": "segfault"}],
        ref_prog=lambda a: a * 2,
    )
    assert [t.status for t in result.trials] == [
        TrialStatus.OK,
        TrialStatus.MISMATCH,
        TrialStatus.RUN_ERROR,
        TrialStatus.CRASH,
    ]
    assert [t.validation for t in result.trials] == [
        Validation.REFERENCE,  # checked, passed
        Validation.REFERENCE,  # checked, failed
        None,  # the kernel raised in its first run
        None,  # the run worker died in it
    ]
    assert seen[1].validation is Validation.REFERENCE and seen[3].validation is None


@pytest.mark.timeout(300)
def test_a_config_whose_kernel_does_not_fit_the_given_inputs_was_not_validated():
    tuner = AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"mode": "padded"}])
    with tileauto.set_autotune_inputs(torch.rand(256)):
        result = tuner.set_profile_args(**QUICK, ref_prog=lambda a: a * 2).run(verbose=False)
    ok, padded = result.trials
    assert ok.validation is Validation.REFERENCE
    assert padded.status is TrialStatus.RUN_ERROR and "inputs do not fit" in padded.error
    assert padded.validation is None


@pytest.mark.timeout(300)
def test_a_default_kept_before_failing_its_manual_check_is_the_reference_after_a_crash():
    """The default config's outputs are kept, then its manual check fails (it compares them
    with themselves here); a crash replaces the run worker, and the next config is still
    compared with them, as its label says."""

    def differs(results, expected):
        return not torch.equal(results[0], expected[0])

    result, seen = tune(
        scale_jit(256), [{"mode": "segfault"}, {"mode": "wrong"}], manual_check_prog=differs
    )
    assert seen[-1].status is TrialStatus.MISMATCH  # the default config failed its own check
    crashed, wrong = result.trials
    assert crashed.status is TrialStatus.CRASH and crashed.validation is None
    assert wrong.status is TrialStatus.OK, wrong  # its outputs differ from the default's
    assert wrong.validation is Validation.DEFAULT
    assert not any(NOT_CALLED in n for n in wrong.notes), wrong.notes
