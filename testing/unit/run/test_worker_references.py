"""What the run worker takes as the reference, and what it hands to the checks.

A default config that leaves outputs unwritten is no reference; a ``ref_prog`` value that is
no tensor is named once; ``manual_check_prog`` works on copies; a count mismatch caused by a
written input that was not found says so; configs with other buffers get a true note.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from scale_builds import build_modes
from tvm import te

from tileauto.jit.compiler import compile_to_dir
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import NOT_COMPARED_NOTE, TrialStatus
from tileauto.run.session import RunRequest, SessionSpec
from tileauto.run.worker import RunWorker, spec_signature

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from tune_kernels import inplace_scale  # noqa: E402

N = 64


def copy_of(n: int, dtype: str = "float32"):
    """B = A + 1 in ``dtype`` (a factory whose configs may pick another dtype)."""
    a = te.placeholder((n,), dtype, name="A")
    b = te.compute((n,), lambda i: a[i] + te.const(1, dtype), name="B")
    return te.create_prim_func([a, b])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    got = build_modes(out, N, ("ok", "partial"))
    args = CompileArgs(out_idx=(-1,), target="llvm")
    for dtype in ("float32", "int32"):
        got[dtype] = compile_to_dir(
            copy_of, (N,), {"dtype": dtype}, args, out / dtype, config={"dtype": dtype}
        )
    got["inplace"] = compile_to_dir(
        inplace_scale, (N,), {}, CompileArgs(target="llvm"), out / "inplace", config={"vec": 8}
    )
    return got


def spec_for(artifact, **profile) -> SessionSpec:
    return SessionSpec(
        params=artifact.params,
        out_pos=artifact.out_idx,
        device="cpu",
        profile=ProfileArgs(warmup_iters=1, rep_iters=1, **profile).for_worker(),
        threads=1,
    )


def run(worker, artifact, *, reference=False):
    request = RunRequest(artifact, dict(artifact.config), is_reference=reference, time_it=False)
    return worker.check_and_time(request)


def test_a_default_config_that_leaves_output_unwritten_is_a_mismatch_not_the_reference(built):
    worker = RunWorker()
    worker.setup(spec_for(built["ok"]), reference=False)
    default = run(worker, built["partial"], reference=True)
    assert default.status is TrialStatus.MISMATCH, default
    assert "unwritten output" in default.error and "elements of B" in default.error
    assert "the default config is the reference when there is no ref_prog" in default.error
    assert default.reference is None and worker.reference_key is None
    # no reference: a correct config passes, a partial one fails on its NaN
    assert run(worker, built["ok"]).status is TrialStatus.OK
    assert run(worker, built["partial"]).status is TrialStatus.MISMATCH


def test_a_default_config_that_leaves_output_unwritten_fails_a_manual_check_too(built):
    worker = RunWorker()
    worker.setup(spec_for(built["ok"], manual_check_prog=lambda r, e: True), reference=False)
    assert run(worker, built["partial"], reference=True).status is TrialStatus.MISMATCH


def test_skip_check_keeps_a_default_config_unchecked(built):
    worker = RunWorker()
    worker.setup(spec_for(built["ok"], skip_check=True), reference=False)
    assert run(worker, built["partial"], reference=True).status is TrialStatus.OK


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"B": 1}, "ref_prog returned a dict: return the expected results as a tensor"),
        ("abc", "ref_prog returned a str"),
        ([torch.zeros(N), {"x": 1}], "ref_prog returned a list whose item 1 is a dict"),
    ],
    ids=["dict", "str", "list-of-dict"],
)
def test_a_ref_prog_value_that_is_no_tensor_fails_each_config_naming_ref_prog(built, value, says):
    worker = RunWorker()
    worker.setup(spec_for(built["ok"], ref_prog=lambda a: value), reference=False)
    worker.compute_reference()
    got = run(worker, built["ok"])
    assert got.status is TrialStatus.MISMATCH, got
    assert got.error.startswith("no reference: ") and says in got.error


def test_a_ref_prog_value_torch_can_read_is_taken(built):
    worker = RunWorker()
    worker.setup(spec_for(built["ok"], ref_prog=lambda a: [(a * 2).numpy()]), reference=False)
    worker.compute_reference()
    assert run(worker, built["ok"]).status is TrialStatus.OK


@pytest.mark.parametrize("with_ref_prog", [False, True], ids=["default", "ref_prog"])
def test_manual_check_prog_gets_copies_of_the_reference(built, with_ref_prog):
    def manual(results, expected):  # computes the error in place, on the reference given
        return bool(expected[0].sub_(results[0]).abs().max() == 0)

    profile = {"manual_check_prog": manual}
    if with_ref_prog:
        profile["ref_prog"] = lambda a: a * 2
    worker = RunWorker()
    worker.setup(spec_for(built["ok"], **profile), reference=False)
    worker.compute_reference()
    run(worker, built["ok"], reference=True)
    for _ in range(3):
        got = run(worker, built["ok"])
        assert got.status is TrialStatus.OK, got


def test_a_written_input_left_unchanged_by_the_data_is_named_with_inplace_args_advice(built):
    artifact = built["inplace"]
    spec = spec_for(artifact, ref_prog=lambda a, b: (a * 2, a * 2))
    spec.captured = [torch.zeros(N), torch.zeros(N)]  # A * 2 leaves zeros as they are
    worker = RunWorker()
    worker.setup(spec, reference=False)
    worker.compute_reference()
    got = run(worker, artifact)
    assert got.status is TrialStatus.MISMATCH, got
    assert "reference gave 2 tensors, the kernel 0 results" in got.error
    assert "written inputs are found by comparing" in got.error
    assert "inplace_args=[...] (input positions: 0: A, 1: B)" in got.error


def test_a_config_of_other_integer_buffers_is_noted_as_not_checked(built):
    worker = RunWorker()
    worker.setup(spec_for(built["float32"]), reference=False)
    assert run(worker, built["float32"], reference=True).status is TrialStatus.OK
    worker.setup(spec_for(built["int32"]), reference=False)
    got = run(worker, built["int32"])
    assert got.status is TrialStatus.OK, got
    (note,) = [n for n in got.notes if n.startswith(NOT_COMPARED_NOTE)]
    assert "not checked (integer or bool results: B)" in note
    assert "only checked for unwritten outputs" not in note
    assert worker.reference_key == spec_signature(spec_for(built["float32"]))


def test_a_config_of_other_float_buffers_is_noted_as_checked_for_unwritten_outputs(built):
    worker = RunWorker()
    worker.setup(spec_for(built["int32"]), reference=False)
    assert run(worker, built["int32"], reference=True).status is TrialStatus.OK
    worker.setup(spec_for(built["float32"]), reference=False)
    got = run(worker, built["float32"])
    (note,) = [n for n in got.notes if n.startswith(NOT_COMPARED_NOTE)]
    assert "only checked for unwritten outputs" in note
