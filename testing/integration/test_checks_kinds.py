"""Real tunings whose wrong configs only the checks on every kind of result catch.

int64 results past float64's precision, integer and bool outputs left unwritten, a checker that
answers with ``tensor(False)`` or ``np.False_``, and ``manual_check_prog`` when the default
config fails (no reference to give it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import te

import tileauto
import tileauto.language as T
from tileauto import AutoTuner, TrialStatus

QUICK = {"warmup_iters": 1, "rep_iters": 3}
# zeros: every expected element (0, False) differs from the fill value (INT_MIN, True)
ZEROS = tileauto.TensorSupplyType.Zero


@tileauto.jit(out_idx=[-1], target="llvm")
def plus(n, dtype="float32", extra=0):
    """B = A + 1 (+ extra: the wrong configs)."""
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: A[i] + tvm.tirx.const(1 + extra, dtype), name="B")
    return te.create_prim_func([A, B])


@tileauto.jit(out_idx=[-1], target="llvm")
def copy_but(n, dtype="float32", skip=0):
    """B = A, except the last ``skip`` elements, never written."""

    @T.prim_func
    def main(A: T.Buffer((n,), dtype), B: T.Buffer((n,), dtype)):
        for i in range(n - skip):
            B[i] = A[i]

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def double(n, block=6):
    """B = 2 * A in tiles of ``block``; the default block=6 does not compile."""
    if block % 4:
        raise ValueError(f"block must be a multiple of 4, got {block}")

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i, j in T.grid(n // block, block):
            B[i * block + j] = A[i * block + j] * T.float32(2)

    return main


def statuses(result) -> dict[int, TrialStatus]:
    return {t.config["extra"]: t.status for t in result.trials}


def test_a_wrong_int64_kernel_fails_even_past_float64_precision():
    a = torch.full((64,), 2**60, dtype=torch.int64)
    with tileauto.set_autotune_inputs(a):
        result = (
            AutoTuner.from_kernel(plus(64, "int64"), [{"extra": 0}, {"extra": 7}])
            .set_profile_args(**QUICK, ref_prog=lambda A: A + 1, rtol=0, atol=0)
            .run(verbose=False)
        )
    wrong = next(t for t in result.trials if t.config["extra"] == 7)
    assert wrong.status is TrialStatus.MISMATCH, wrong
    assert "worst abs error 7" in wrong.error, wrong.error
    assert result.config["extra"] == 0


@pytest.mark.parametrize(
    "checker",
    [
        lambda A, B: (B == A + 1).all(),
        lambda A, B: np.all(B.numpy() == A.numpy() + 1),
    ],
    ids=["tensor", "numpy"],
)
def test_a_checker_answering_a_false_tensor_or_numpy_bool_fails_the_config(checker):
    result = (
        AutoTuner.from_kernel(plus(64), [{"extra": 0}, {"extra": 5}])
        .set_profile_args(**QUICK, ref_prog=checker)
        .run(verbose=False)
    )
    assert statuses(result) == {0: TrialStatus.OK, 5: TrialStatus.MISMATCH}


def test_a_manual_check_answering_a_false_tensor_fails_the_config():
    result = (
        AutoTuner.from_kernel(plus(64), [{"extra": 0}, {"extra": 5}])
        .set_profile_args(
            **QUICK, ref_prog=lambda A: A + 1, manual_check_prog=lambda r, e: (r[0] == e[0]).all()
        )
        .run(verbose=False)
    )
    assert statuses(result) == {0: TrialStatus.OK, 5: TrialStatus.MISMATCH}


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_an_integer_or_bool_output_left_unwritten_fails_within_the_mismatch_ratio(dtype):
    # 1 element of 200 (0.5%) is under the default 1% ratio
    result = (
        AutoTuner.from_kernel(copy_but(200, dtype), [{"skip": 0}, {"skip": 1}])
        .set_profile_args(**QUICK, ref_prog=lambda A: A.clone(), supply_type=ZEROS)
        .run(verbose=False)
    )
    skipped = next(t for t in result.trials if t.config["skip"] == 1)
    assert skipped.status is TrialStatus.MISMATCH, skipped
    assert skipped.error.startswith("unwritten output: 1 elements of B"), skipped.error
    assert result.config["skip"] == 0


def test_manual_check_without_a_default_config_lets_correct_configs_pass():
    def manual(results, expected):  # as in docs/tuning.md
        torch.testing.assert_close(results[0], expected[0])

    result = (
        AutoTuner.from_kernel(double(64, block=8), [{"block": 8}, {"block": 16}])
        .set_profile_args(**QUICK, manual_check_prog=manual)
        .run(verbose=False)
    )
    assert result.default_trial.status is TrialStatus.COMPILE_ERROR
    assert [t.status for t in result.trials] == [TrialStatus.OK, TrialStatus.OK]
