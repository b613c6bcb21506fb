"""Tests of tileauto.run.validate.compare: tolerances, mismatch ratio, NaN, shapes."""

from __future__ import annotations

import pytest
import torch

from tileauto.run.validate import Verdict, check_bool, compare

TOL = {"rtol": 1e-2, "atol": 1e-2, "max_mismatched_ratio": 0.0}


def test_equal_passes():
    x = torch.randn(16, 8)
    verdict = compare([x], x.clone(), **TOL)
    assert verdict == Verdict(True)


def test_within_tolerance_passes():
    want = torch.linspace(-4, 4, 100)
    got = want + 0.005 + 0.004 * want.abs()  # below atol + rtol * |want|
    assert compare([got], want, **TOL).ok


def test_just_outside_tolerance_fails_with_details():
    want = torch.zeros(10)
    got = want.clone()
    got[3] = 0.5
    verdict = compare([got], want, **TOL, names=["C"])
    assert not verdict.ok
    msg = verdict.message
    assert msg.startswith("C:")
    assert "1/10 elements" in msg and "flat index 3" in msg
    assert "got 0.5" in msg and "expected 0" in msg
    assert "worst abs error 0.5" in msg


def test_relative_tolerance_scales_with_reference():
    want = torch.full((4,), 1000.0)
    assert compare([want + 5.0], want, **TOL).ok  # 5 <= 0.01 + 0.01 * 1000
    assert not compare([want + 20.0], want, **TOL).ok


@pytest.mark.parametrize(
    "n_bad, ratio, ok",
    [(1, 0.01, True), (2, 0.01, False), (5, 0.05, True), (6, 0.05, False), (100, 1.0, True)],
)
def test_mismatch_ratio_threshold(n_bad, ratio, ok):
    want = torch.zeros(100)
    got = want.clone()
    got[:n_bad] = 1.0
    verdict = compare([got], want, rtol=1e-2, atol=1e-2, max_mismatched_ratio=ratio, names=["out"])
    assert verdict.ok is ok
    if not ok:
        assert f"{n_bad}/100 elements" in verdict.message


def test_nan_left_in_output_fails():
    want = torch.ones(8)
    got = want.clone()
    got[5] = float("nan")
    verdict = compare([got], want, **TOL)
    assert not verdict.ok
    assert "unwritten output: 1 elements of result 0" in verdict.message


def test_unwritten_elements_fail_within_the_mismatch_ratio():
    # 32 of 4,000 (0.8%) is under the default 1% ratio: rounding slack, not missing work
    want = torch.ones(4000)
    got = want.clone()
    got[-32:] = float("nan")
    verdict = compare([got], want, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.01, names=["C"])
    assert not verdict.ok
    assert verdict.message.startswith("unwritten output: 32 elements of C")


def test_nan_that_the_reference_also_computes_is_not_unwritten():
    want = torch.ones(8)
    want[2] = float("nan")
    got = want.clone()
    assert compare([got], want, **TOL).ok


def test_all_nan_output_fails_even_with_loose_tolerance():
    want = torch.ones(8)
    got = torch.full((8,), float("nan"))
    verdict = compare([got], want, rtol=1.0, atol=1.0, max_mismatched_ratio=0.5)
    assert not verdict.ok
    assert "unwritten output: 8 elements" in verdict.message


def test_nan_in_both_matches():
    want = torch.tensor([1.0, float("nan"), 3.0])
    assert compare([want.clone()], want, **TOL).ok


def test_nan_expected_but_number_given_fails():
    want = torch.tensor([1.0, float("nan")])
    assert not compare([torch.tensor([1.0, 2.0])], want, **TOL).ok


def test_equal_infinities_match():
    inf = float("inf")
    want = torch.tensor([inf, -inf, 1.0])
    assert compare([want.clone()], want, **TOL).ok


def test_infinite_result_against_finite_reference_fails():
    assert not compare([torch.tensor([float("inf"), 1.0])], torch.ones(2), **TOL).ok


@pytest.mark.parametrize("got", [float("-inf"), 5.0, 0.0])
def test_wrong_value_against_infinite_reference_fails(got):
    want = torch.tensor([float("inf"), 1.0])
    assert not compare([torch.tensor([got, 1.0])], want, **TOL).ok


def test_shape_mismatch_fails():
    verdict = compare([torch.zeros(4, 4)], torch.zeros(3, 4), **TOL, names=["C"])
    assert not verdict.ok
    assert "shape [4, 4]" in verdict.message and "reference [3, 4]" in verdict.message


def test_same_numel_reference_is_reshaped():
    want = torch.arange(12.0)
    assert compare([want.reshape(3, 4).clone()], want, **TOL).ok


def test_count_mismatch_fails():
    x = torch.zeros(3)
    verdict = compare([x, x], [x], **TOL)
    assert not verdict.ok and "reference gave 1 tensors, the kernel 2" in verdict.message


def test_multiple_results_are_all_checked():
    a, b = torch.zeros(4), torch.ones(4)
    assert compare([a, b], (a.clone(), b.clone()), **TOL).ok
    verdict = compare([a, b], [a.clone(), b + 1], **TOL, names=["X", "Y"])
    assert not verdict.ok and verdict.message.startswith("Y:")


def test_reference_may_be_a_number_list_or_other_dtype():
    got = torch.full((3,), 2.0)
    assert compare([got], [torch.tensor([2, 2, 2], dtype=torch.int32)], **TOL).ok
    assert compare([got], [[2.0, 2.0, 2.0]], **TOL).ok
    assert compare([got.half()], got.double(), **TOL).ok


def test_integer_results():
    want = torch.arange(10, dtype=torch.int32)
    assert compare([want.clone()], want, rtol=0, atol=0, max_mismatched_ratio=0).ok
    assert not compare([want + 1], want, rtol=0, atol=0, max_mismatched_ratio=0).ok


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8])
def test_an_integer_reference_holding_the_fill_value_where_it_differs_says_so(dtype):
    # a default config that left part of an integer output unwritten is the reference: the
    # correct configs then fail "expected -2147483648" with nothing saying where that came from
    fill = torch.iinfo(dtype).min if dtype.is_signed else torch.iinfo(dtype).max
    want = torch.arange(10, dtype=dtype)
    want[6:] = fill
    verdict = compare([torch.arange(10, dtype=dtype)], want, rtol=0, atol=0, max_mismatched_ratio=0)
    assert not verdict.ok
    assert f"expected {fill} (every mismatched element of the reference is {fill}, the value " in (
        verdict.message
    )
    assert "may have left them unwritten" in verdict.message
    # a reference that differs otherwise too says nothing of it
    want[0] = 7
    verdict = compare([torch.arange(10, dtype=dtype)], want, rtol=0, atol=0, max_mismatched_ratio=0)
    assert not verdict.ok and "unwritten" not in verdict.message


def test_default_name_is_result_index():
    verdict = compare([torch.zeros(2)], [torch.ones(2)], **TOL)
    assert verdict.message.startswith("result 0:")


def test_check_bool():
    assert check_bool(True) == Verdict(True, "")
    verdict = check_bool(False)
    assert verdict is not None and not verdict.ok and "False" in verdict.message
    assert check_bool(torch.zeros(1)) is None
    assert check_bool(None) is None
