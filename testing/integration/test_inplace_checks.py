"""Real tunings of kernels that write into their inputs, and the checks that catch them.

A written input starts as a copy of the input, not filled like an output: an element the
kernel skips keeps its old value, and fails the config whatever the tolerances, as an unwritten
output does. A config that writes into an input the reference leaves out fails under every
check mode, and a checker ``ref_prog`` whose count does not fit says why, not a TypeError.
"""

from __future__ import annotations

import pytest
import torch

import tileauto
import tileauto.language as T
from tileauto import AutoTuner, TrialStatus
from tileauto.errors import NoValidConfigError

QUICK = {"warmup_iters": 1, "rep_iters": 3}
N = 2000  # block=64 leaves its last 16 elements (0.8%, under max_mismatched_ratio's 1%)


@tileauto.jit(target="llvm")  # no out_idx: B is passed by the caller (destination passing)
def double_into(n, block=16):
    """B = 2 * A in tiles of ``block``; a block that does not divide n skips the tail."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i, j in T.grid(n // block, block):
            B[i * block + j] = A[i * block + j] * T.float32(2)

    return main


@tileauto.jit(target="llvm")
def triple_(n, block=16, off=0):
    """X *= 3 in place in tiles of ``block``; ``off`` adds 0.5 to every 100th element."""

    @T.prim_func
    def main(X: T.Buffer((n,), "float32")):
        for i, j in T.grid(n // block, block):
            k = i * block + j
            X[k] = X[k] * T.float32(3) + T.if_then_else(
                k % 100 == 0, T.float32(0.5 * off), T.float32(0)
            )

    return main


@tileauto.jit(target="llvm")
def relu_(n, block=16):
    """X = max(X, 0) in place: elements already positive are left as they were."""

    @T.prim_func
    def main(X: T.Buffer((n,), "float32")):
        for i, j in T.grid(n // block, block):
            X[i * block + j] = T.max(X[i * block + j], T.float32(0))

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def double_clobber(n, clobber=0):
    """B = 2 * A; with clobber=1 it also zeroes A (a bug: it destroys the caller's input)."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i] * T.float32(2)
            if clobber == 1:
                A[i] = T.float32(0)

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def double_and_add(n, f=1):
    """B = 2 * A, and S += f * A in place (f=1 is right)."""

    @T.prim_func
    def main(
        A: T.Buffer((n,), "float32"), S: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")
    ):
        for i in range(n):
            B[i] = A[i] * T.float32(2)
            S[i] = S[i] + A[i] * T.float32(f)

    return main


def trials(result, key):
    return {t.config[key]: t for t in result.trials}


def test_a_destination_passing_kernel_that_skips_its_tail_fails_and_never_wins():
    result = (
        AutoTuner.from_kernel(double_into(N), [{"block": 64}, {"block": 16}])
        .set_profile_args(**QUICK, ref_prog=lambda A, B: [A * 2], inplace_args=[1])
        .run(verbose=False)
    )
    by_block = trials(result, "block")
    wrong = by_block[64]
    assert wrong.status is TrialStatus.MISMATCH, wrong
    assert wrong.error.startswith(
        "unwritten: 16 elements of B (of 2000; first at flat index 1984) still hold their "
        "input values where the reference changed them"
    ), wrong.error
    assert by_block[16].status is TrialStatus.OK
    assert result.config == {"block": 16}


REFERENCES = {
    "default config": {},
    "ref_prog": {"ref_prog": lambda X: X * 3},
    "ref_prog, inplace_args": {"ref_prog": lambda X: X * 3, "inplace_args": [0]},
    "default config, manual check": {"manual_check_prog": lambda results, expected: True},
    "ref_prog, manual check": {
        "ref_prog": lambda X: X * 3,
        "manual_check_prog": lambda results, expected: True,
    },
}


@pytest.mark.parametrize("reference", REFERENCES.values(), ids=REFERENCES.keys())
def test_an_in_place_kernel_that_skips_elements_fails_whatever_the_reference(reference):
    result = (
        AutoTuner.from_kernel(triple_(N), [{"block": 16}, {"block": 64}])
        .set_profile_args(**QUICK, **reference)
        .run(verbose=False)
    )
    by_block = trials(result, "block")
    assert by_block[16].status is TrialStatus.OK, by_block[16]
    wrong = by_block[64]
    assert wrong.status is TrialStatus.MISMATCH, wrong
    assert wrong.error.startswith("unwritten: 16 elements of X (of 2000; first at flat index 1984)")
    assert result.config == {"block": 16}


def test_the_docs_in_place_example_fails_when_no_block_divides_n():
    n = 4100  # neither 16 nor 128 divides it: every config leaves the last 4 unscaled
    with pytest.raises(NoValidConfigError, match="unwritten: 4 elements of X"):
        AutoTuner.from_kernel(triple_(n), [{"block": 16}, {"block": 128}]).set_profile_args(
            **QUICK, ref_prog=lambda X: X * 3
        ).run(verbose=False)


def test_elements_the_reference_leaves_alone_and_forgiven_errors_still_pass():
    # relu leaves positive elements as they were; every 100th element 0.5 off is a mismatch
    # the ratio forgives (20 of 2000, with max_mismatched_ratio=0.02), not an unwritten one
    relu = (
        AutoTuner.from_kernel(relu_(N), [{"block": 16}, {"block": 8}])
        .set_profile_args(**QUICK, ref_prog=lambda X: X.clamp(min=0))
        .run(verbose=False)
    )
    assert all(t.status is TrialStatus.OK for t in relu.trials), relu.trials
    off = (
        AutoTuner.from_kernel(triple_(N), [{"off": 0}, {"off": 1}])
        .set_profile_args(**QUICK, ref_prog=lambda X: X * 3, max_mismatched_ratio=0.02)
        .run(verbose=False)
    )
    assert all(t.status is TrialStatus.OK for t in off.trials), off.trials


def test_a_config_that_writes_an_input_the_reference_leaves_out_fails_a_manual_check_too():
    def manual(results, expected):
        torch.testing.assert_close(results[0], expected[0])

    result = (
        AutoTuner.from_kernel(double_clobber(64), [{"clobber": 1}, {"clobber": 0}])
        .set_profile_args(**QUICK, ref_prog=lambda A: A * 2, manual_check_prog=manual)
        .run(verbose=False)
    )
    by_clobber = trials(result, "clobber")
    wrong = by_clobber[1]
    assert wrong.status is TrialStatus.MISMATCH, wrong
    assert "reference gave 1 tensors, the kernel 2 results (outputs: B; written inputs: A)" in (
        wrong.error
    )
    assert result.config == {"clobber": 0}


def test_a_checker_given_a_written_input_it_does_not_take_names_the_input():
    def checker(A, B):
        return bool(torch.allclose(B, A * 2))

    result = (
        AutoTuner.from_kernel(double_clobber(64), [{"clobber": 1}, {"clobber": 0}])
        .set_profile_args(**QUICK, ref_prog=checker)
        .run(verbose=False)
    )
    wrong = trials(result, "clobber")[1]
    assert wrong.status is TrialStatus.MISMATCH, wrong
    assert wrong.error.startswith("writes into input 'A', which ref_prog does not take"), wrong
    assert "TypeError" not in wrong.error
    assert "inplace_args=[0]" in wrong.error
    assert result.config == {"clobber": 0}


def check(A, S, B, S_new):
    return bool(torch.allclose(B, A * 2) and torch.allclose(S_new, S + A))


def test_a_checker_of_written_inputs_not_declared_says_how_its_form_was_read():
    with pytest.raises(NoValidConfigError) as caught:
        AutoTuner.from_kernel(double_and_add(32), [{"f": 1}, {"f": 2}]).set_profile_args(
            **QUICK, ref_prog=check
        ).run(verbose=False)
    message = str(caught.value)
    assert "ref_prog has 4 required positional parameters" in message, message
    assert "a checker takes 3 arguments: the inputs (A, S), then the results (B)" in message
    assert "inplace_args=[...] (input positions: 0: A, 1: S)" in message
    declared = (
        AutoTuner.from_kernel(double_and_add(32), [{"f": 2}, {"f": 1}])
        .set_profile_args(**QUICK, ref_prog=check, inplace_args=[1])
        .run(verbose=False)
    )
    assert declared.config == {"f": 1}
