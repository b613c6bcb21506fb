"""The run worker's side, called in this process: inputs, the reference, checks and timing.

A run worker process runs these jobs on its one RunWorker; here each test makes its own, in
the test's process (on kernels that do not crash), so each verdict is checked without a worker.
"""

from __future__ import annotations

import pytest
from scale_builds import build_modes  # noqa: E402

from tileauto.options import ProfileArgs
from tileauto.records import TrialStatus
from tileauto.run import check as run_check
from tileauto.run import worker as run_worker
from tileauto.run.session import RunRequest, SessionSpec
from tileauto.run.worker import RunWorker

N = 256


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Compiled configs by mode (one compile each, for the module)."""
    return build_modes(
        tmp_path_factory.mktemp("built"), N, ("ok", "wrong", "partial", "spill", "inplace")
    )


@pytest.fixture
def worker():
    return RunWorker()


def spec_for(artifact, **profile) -> SessionSpec:
    return SessionSpec(
        params=artifact.params,
        out_pos=artifact.out_idx,
        device="cpu",
        profile=ProfileArgs(warmup_iters=1, rep_iters=3, **profile).for_worker(),
        threads=1,
    )


def run(worker, artifact, *, reference=False, time_it=True):
    request = RunRequest(artifact, dict(artifact.config), is_reference=reference, time_it=time_it)
    return worker.check_and_time(request)


def test_the_default_is_the_reference_and_a_correct_config_passes_with_samples(worker, built):
    worker.setup(spec_for(built["ok"]), reference=False)
    first = run(worker, built["ok"], reference=True)
    assert first.status is TrialStatus.OK and first.reference is not None
    again = run(worker, built["ok"])
    assert again.status is TrialStatus.OK and len(again.samples_ns) == 3


@pytest.mark.parametrize(
    ("mode", "status", "says"),
    [
        ("wrong", TrialStatus.MISMATCH, "outside rtol"),
        ("partial", TrialStatus.MISMATCH, "unwritten output"),
        ("spill", TrialStatus.OUT_OF_BOUNDS, "wrote outside the bounds of B"),
    ],
)
def test_each_wrong_kernel_gets_its_verdict(worker, built, mode, status, says):
    worker.setup(spec_for(built["ok"]), reference=False)
    run(worker, built["ok"], reference=True)
    got = run(worker, built[mode])
    assert got.status is status, got
    assert says in (got.error or ""), got.error


def test_a_ref_prog_is_the_reference_and_a_kernel_that_writes_its_input_is_noted(worker, built):
    spec = spec_for(built["ok"], ref_prog=lambda a: a * 2)
    worker.setup(spec, reference=False)
    worker.compute_reference()
    assert run(worker, built["ok"]).status is TrialStatus.OK
    inplace = run(worker, built["inplace"])
    assert any("writes into input 'A'" in note for note in inplace.notes)


def test_the_user_inputs_are_never_touched(worker, built):
    import torch

    a = torch.arange(N, dtype=torch.float32)
    spec = spec_for(built["inplace"])
    spec.captured = [a.clone()]
    worker.setup(spec, reference=False)
    run(worker, built["inplace"], reference=True)
    run(worker, built["inplace"])
    assert torch.equal(spec.captured[0], a)  # the session works on its own copies


def test_a_fresh_process_checks_and_times_a_kernel_without_importing_the_compiler(built, tmp_path):
    """A run worker that did not start with TVM imported (a Ray run actor) loads kernels with
    TVM's runtime alone: importing ``tvm`` for its first kernel cost it 1.6 s."""
    import subprocess
    import sys

    import cloudpickle

    job = tmp_path / "job.pkl"
    job.write_bytes(cloudpickle.dumps((spec_for(built["ok"]), built["ok"])))
    script = (
        "import sys, cloudpickle\n"
        "from tileauto.run import worker as run_worker\n"
        "from tileauto.run.session import RunRequest\n"
        f"spec, artifact = cloudpickle.loads(open({str(job)!r}, 'rb').read())\n"
        "run_worker.setup(spec, reference=False)\n"
        "first = run_worker.check_and_time(RunRequest(artifact, dict(artifact.config), "
        "is_reference=True, time_it=False))\n"
        "again = run_worker.check_and_time(RunRequest(artifact, dict(artifact.config)))\n"
        "print(first.status.value, again.status.value, len(again.samples_ns), "
        "'tvm' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ok", "ok", "3", "False"], proc.stdout


def test_own_work_runs_on_one_torch_thread_and_the_users_programs_on_the_tunings(
    worker, built, monkeypatch
):
    """Copies and comparisons split over torch's threads wait at its barrier for a thread that
    other processes keep off the CPU (milliseconds per config on a busy machine): they run on
    one thread, while ``ref_prog`` (the user's code) keeps the tuning's thread count."""
    import torch

    from tileauto.jit import launcher

    seen: dict[str, int] = {}

    def spy(name, real):
        def wrapped(*args, **kwargs):
            seen[name] = torch.get_num_threads()
            return real(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(run_check, "compare", spy("compare", run_check.compare))
    monkeypatch.setattr(run_worker, "padded_clones", spy("clones", run_worker.padded_clones))
    monkeypatch.setattr(run_worker, "canaries_intact", spy("canaries", run_worker.canaries_intact))

    def ref_prog(a):
        seen["ref_prog"] = torch.get_num_threads()
        return a * 2

    spec = spec_for(built["ok"], ref_prog=ref_prog)
    spec.threads = 2
    torch_before, pool_before = torch.get_num_threads(), launcher.threads()
    try:
        worker.setup(spec, reference=False)
        worker.compute_reference()
        assert run(worker, built["ok"]).status is TrialStatus.OK
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(torch_before)
        launcher.set_threads(pool_before)
    assert seen == {"ref_prog": 2, "clones": 1, "canaries": 1, "compare": 1}
    assert after == 2  # restored for whatever runs next
