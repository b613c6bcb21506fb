"""``trial.validation`` says what a config was checked against, and nothing it was not.

Without a ``ref_prog`` the default config's outputs are the reference, but only once the run
worker has kept them: a default config that leaves outputs unwritten is a mismatch found
*before* they are kept (none is), one that fails a ``manual_check_prog`` is found after. The
run worker says which in ``RunOutcome.reference_kept``. A config whose run ended before the
check (a crash, a timeout, a run error) was checked against nothing: its validation is None.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tileauto.options import ProfileArgs
from tileauto.records import (
    BuildResult,
    BuildStatus,
    RunOutcome,
    TrialStatus,
    Validation,
)
from tileauto.run.session import RunRequest, SessionSpec
from tileauto.run.worker import DEFAULT_NOT_REFERENCE, RunWorker
from tileauto.testing import RecordingReporter, ScriptedBuilder, ScriptedRunner
from tileauto.tune._trials import trial_of
from tileauto.tune.session import TuningSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run"))
from scale_builds import build_modes  # noqa: E402

SPACE = [{"block": 16}, {"block": 32}, {"block": 64}]  # 32 is the factory's default
LATENCY = {16: 3.0, 32: 2.0, 64: 1.0}


@dataclass
class SayingRunner(ScriptedRunner):
    """A scripted runner that says, as the run worker does, whether the default config's
    outputs were held as each run's reference (``kept``: None says nothing)."""

    kept: bool | None = None

    def run(self, artifact, config, *, is_reference, time_it=True):
        got = super().run(artifact, config, is_reference=is_reference, time_it=time_it)
        return replace(got, reference_kept=self.kept)


def tune(problem, script, *, runner=None, **profile):
    seen = []
    session = TuningSession(
        problem(configs=SPACE, on_trial=seen.append, **profile),
        builder=ScriptedBuilder(),
        runner=runner or ScriptedRunner(script),
        reporter=RecordingReporter(),
    )
    result = session.run()
    return result, {t.config["block"]: t for t in seen}


def unwritten_default(config):
    if config["block"] == 32:
        return ("mismatch", f"unwritten output: 128 elements of B; {DEFAULT_NOT_REFERENCE}")
    return LATENCY[config["block"]]


def test_a_default_that_left_outputs_unwritten_is_no_reference_and_nothing_was_compared(problem):
    script = unwritten_default
    result, by_block = tune(problem, script, runner=SayingRunner(script, kept=False))
    assert result.default_trial.status is TrialStatus.MISMATCH
    assert by_block[16].validation is by_block[64].validation is Validation.SKIPPED
    assert by_block[32].validation is Validation.SKIPPED  # the default itself


def test_a_default_that_failed_its_manual_check_after_being_kept_is_the_reference(problem):
    def script(config):
        if config["block"] == 32:
            return ("mismatch", "manual_check_prog returned False")
        return LATENCY[config["block"]]

    manual = {"manual_check_prog": lambda r, e: True}
    _, by_block = tune(problem, script, runner=SayingRunner(script, kept=True), **manual)
    assert by_block[16].validation is by_block[64].validation is Validation.DEFAULT


def test_a_runner_that_does_not_say_is_judged_by_the_default_configs_status(problem):
    _, by_block = tune(problem, unwritten_default)  # a plain scripted runner: as before
    assert by_block[16].validation is Validation.DEFAULT
    crashed = lambda c: "crash" if c["block"] == 32 else LATENCY[c["block"]]  # noqa: E731
    _, by_block = tune(problem, crashed)
    assert by_block[16].validation is by_block[64].validation is Validation.SKIPPED


@pytest.mark.parametrize("status", ["crash", "timeout", "run_error", "out_of_memory", "cancelled"])
@pytest.mark.parametrize(
    ("profile", "checked"),
    [
        ({"ref_prog": lambda a: a * 2}, Validation.REFERENCE),
        ({}, Validation.DEFAULT),
        ({"skip_check": True}, Validation.SKIPPED),
    ],
    ids=["ref_prog", "default", "skip_check"],
)
def test_a_config_whose_run_never_reached_the_check_was_validated_against_nothing(
    problem, status, profile, checked
):
    def script(config):
        return status if config["block"] == 16 else LATENCY[config["block"]]

    _, by_block = tune(problem, script, **profile)
    assert by_block[16].status.value == status
    assert by_block[16].validation is None
    assert by_block[64].validation is checked  # a config that was checked keeps its label


@pytest.mark.parametrize("status", ["mismatch", "out_of_bounds"])
def test_a_config_that_failed_the_check_keeps_its_label(problem, status):
    def script(config):
        return status if config["block"] == 16 else LATENCY[config["block"]]

    _, by_block = tune(problem, script, ref_prog=lambda a: a * 2)
    assert by_block[16].validation is Validation.REFERENCE


def test_a_passing_check_whose_timing_was_unusable_was_still_checked():
    build = BuildResult(0, {"block": 16}, BuildStatus.OK)
    run = RunOutcome(TrialStatus.OK, samples_ns=(float("nan"),))
    trial = trial_of(0, build, run, Validation.REFERENCE)
    assert trial.status is TrialStatus.RUN_ERROR  # a NaN sample, after the check passed
    assert trial.validation is Validation.REFERENCE


# -- the run worker says whether it held the default config's outputs ---------------------------
N = 256


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_modes(tmp_path_factory.mktemp("built"), N, ("ok", "wrong", "partial", "spill"))


def worker_for(artifact, **profile) -> RunWorker:
    worker = RunWorker()
    spec = SessionSpec(
        params=artifact.params,
        out_pos=artifact.out_idx,
        device="cpu",
        profile=ProfileArgs(warmup_iters=1, rep_iters=3, **profile).for_worker(),
        threads=1,
    )
    worker.setup(spec, reference=False)
    return worker


def run(worker, artifact, *, reference=False):
    return worker.check_and_time(
        RunRequest(artifact, dict(artifact.config), is_reference=reference)
    )


def test_the_worker_says_a_default_with_unwritten_outputs_was_not_kept(built):
    worker = worker_for(built["ok"])
    default = run(worker, built["partial"], reference=True)
    assert default.status is TrialStatus.MISMATCH and DEFAULT_NOT_REFERENCE in default.error
    assert default.reference_kept is False and default.reference is None
    for mode, status in [("ok", TrialStatus.OK), ("wrong", TrialStatus.OK)]:
        got = run(worker, built[mode])  # "wrong" passes: only unwritten outputs are checked
        assert got.status is status and got.reference_kept is False, (mode, got)


def test_the_worker_says_a_kept_default_was_each_configs_reference(built):
    worker = worker_for(built["ok"])
    default = run(worker, built["ok"], reference=True)
    assert default.status is TrialStatus.OK and default.reference_kept is True
    for mode, status in [
        ("ok", TrialStatus.OK),
        ("wrong", TrialStatus.MISMATCH),
        ("spill", TrialStatus.OUT_OF_BOUNDS),
    ]:
        got = run(worker, built[mode])
        assert got.status is status and got.reference_kept is True, (mode, got)


def test_a_default_that_fails_its_manual_check_is_kept_and_handed_to_the_parent(built):
    """Kept in the worker, its outputs come back too: the parent gives them to a replacement
    worker (after a crash) and to other run slots, which then check as this one does."""
    worker = worker_for(built["ok"], manual_check_prog=lambda r, e: False)
    default = run(worker, built["ok"], reference=True)
    assert default.status is TrialStatus.MISMATCH and default.reference_kept is True
    assert default.reference is not None
    got = run(worker, built["wrong"])
    assert got.status is TrialStatus.MISMATCH and got.reference_kept is True


def test_with_a_ref_prog_the_default_config_is_no_reference(built):
    worker = worker_for(built["ok"], ref_prog=lambda a: a * 2)
    worker.compute_reference()
    assert run(worker, built["ok"], reference=True).reference_kept is False
    assert run(worker, built["ok"]).reference_kept is False
