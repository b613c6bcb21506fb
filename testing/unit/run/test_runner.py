"""The parent's side of running configs: one isolated run worker, replaced after a failure."""

from __future__ import annotations

import pytest
from scale_builds import build_modes  # noqa: E402

from tileauto.options import ProfileArgs
from tileauto.records import TrialStatus
from tileauto.run.runner import Runner
from tileauto.tune.stages import RunStage

N = 256


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_modes(tmp_path_factory.mktemp("built"), N, ("ok", "segfault", "hang", "wrong"))


@pytest.fixture
def runner():
    r = Runner(ProfileArgs(warmup_iters=1, rep_iters=3, timeout=5.0), threads=1)
    yield r
    r.kill()


def run(r, artifact, reference=False):
    return r.run(artifact, dict(artifact.config), is_reference=reference)


def test_it_is_a_run_stage(runner):
    assert isinstance(runner, RunStage)


def test_inplace_args_are_checked_against_the_kernel_before_any_run(built):
    r = Runner(ProfileArgs(inplace_args=[5]), threads=1)
    with pytest.raises(ValueError, match=r"inplace_args=\[5\]: \[5\] is not .* 0: A"):
        r.prepare(built["ok"])


@pytest.mark.timeout(120)
def test_a_crash_and_a_hang_replace_the_worker_and_the_next_config_runs(runner, built):
    runner.start()
    runner.prepare(built["ok"])
    assert run(runner, built["ok"], reference=True).status is TrialStatus.OK
    first_pid = runner.worker.pid
    crash = run(runner, built["segfault"])
    assert crash.status is TrialStatus.CRASH and "replaced" in crash.error
    hang = run(runner, built["hang"])
    assert hang.status is TrialStatus.TIMEOUT and "timed out after 5 s" in hang.error
    assert "killed and replaced" in hang.error
    # the replacement worker was set up again, with the default config's reference
    assert run(runner, built["wrong"]).status is TrialStatus.MISMATCH
    assert runner.worker.pid not in (None, first_pid)
    ok = run(runner, built["ok"])
    assert ok.status is TrialStatus.OK and len(ok.samples_ns) == 3
    assert ok.reference is None  # the reference stays with the runner, not in outcomes


def test_kill_is_immediate_and_idempotent(runner, built):
    runner.prepare(built["ok"])
    assert run(runner, built["ok"], reference=True).status is TrialStatus.OK
    runner.kill()
    runner.kill()
    assert not runner.worker.alive


def test_inplace_args_naming_a_scalar_input_is_refused_naming_it():
    from types import SimpleNamespace

    from tileauto.artifact import ParamSpec
    from tileauto.run.runner import _inplace_positions

    params = (
        ParamSpec("A", (4,), "int32"),
        ParamSpec("s", (), "int32", scalar=True),
        ParamSpec("B", (4,), "int32"),
    )
    kernel = SimpleNamespace(params=params, out_idx=(2,))
    assert _inplace_positions((0,), kernel) == (0,)
    with pytest.raises(ValueError, match=r"inplace_args=\[-1\]: \[-1\] name the scalar .* s"):
        _inplace_positions((-1,), kernel)


@pytest.mark.timeout(180)
def test_a_new_worker_whose_run_of_the_default_fails_keeps_the_first_reference(
    runner, built, monkeypatch
):
    """A worker replaced after a crash runs the default config again for its reference; where
    that run fails too, the first worker's reference is used (the inputs are seeded: the
    same), rather than the failure ending the tuning."""
    import os

    from tileauto.run import worker as run_worker

    runner.start()
    runner.prepare(built["ok"])
    assert run(runner, built["ok"], reference=True).status is TrialStatus.OK
    assert run(runner, built["segfault"]).status is TrialStatus.CRASH
    original = run_worker.check_and_time

    def default_dies(request):  # sent by value to the new worker
        if request.is_reference:
            os._exit(3)
        return original(request)

    monkeypatch.setattr(run_worker, "check_and_time", default_dies)
    assert run(runner, built["ok"]).status is TrialStatus.OK  # against the first reference
    assert run(runner, built["wrong"]).status is TrialStatus.MISMATCH
