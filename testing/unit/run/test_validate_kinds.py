"""The checks on results of every kind: integer and bool outputs, bool answers of any type.

Integer results are compared exactly, an integer or bool output still holding its fill value
is unwritten, a check's ``tensor(False)`` or ``np.False_`` fails like ``False``, and
``manual_check_prog`` is never called without its reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tileauto.options import ProfileArgs
from tileauto.run.buffers import padded_buffer
from tileauto.run.check import check_outputs
from tileauto.run.session import RunSession, SessionSpec
from tileauto.run.validate import Verdict, check_bool, compare, fill_value, unwritten

EXACT = {"rtol": 0.0, "atol": 0.0, "max_mismatched_ratio": 0.0}
LOOSE = {"rtol": 1e-2, "atol": 1e-2, "max_mismatched_ratio": 0.01}
BIG = 2**60


# -- integers are compared as integers ---------------------------------------------------------
def test_int64_results_beyond_float64_precision_are_compared_exactly():
    want = torch.full((4,), BIG + 1, dtype=torch.int64)
    verdict = compare([want + 7], want, **EXACT, names=["B"])
    assert not verdict.ok
    assert "worst abs error 7" in verdict.message, verdict.message
    assert f"got {BIG + 8}, expected {BIG + 1}" in verdict.message, verdict.message
    assert compare([want.clone()], want, **EXACT).ok


def test_an_integer_result_against_a_whole_float_reference_is_compared_exactly():
    want = torch.full((2,), float(BIG), dtype=torch.float64)  # 2**60 is exact in float64
    assert not compare([torch.full((2,), BIG + 1, dtype=torch.int64)], want, **EXACT).ok
    assert compare([torch.full((2,), BIG, dtype=torch.int64)], want, **EXACT).ok


def test_integer_differences_that_overflow_int64_still_mismatch():
    top = torch.iinfo(torch.int64).max
    got = torch.tensor([top, 0], dtype=torch.int64)
    want = torch.tensor([-top, 0], dtype=torch.int64)  # top - (-top) wraps around in int64
    verdict = compare([got], want, rtol=0.0, atol=10.0, max_mismatched_ratio=0.0)
    assert not verdict.ok and "1/2 elements" in verdict.message, verdict.message
    assert compare([got], want, rtol=0.0, atol=1e30, max_mismatched_ratio=0.0).ok


def test_integer_tolerances_are_applied_as_given():
    want = torch.tensor([1000], dtype=torch.int32)
    assert compare([want + 10], want, **LOOSE).ok  # 10 <= 0.01 + 0.01 * 1000
    assert not compare([want + 11], want, **LOOSE).ok


def test_bool_results_are_compared():
    want = torch.tensor([True, False, True])
    assert compare([want.clone()], want, **LOOSE).ok
    got = torch.tensor([True, False, False])
    verdict = compare([got], want, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.0)
    assert not verdict.ok and "got 0, expected 1" in verdict.message, verdict.message


# -- integer and bool outputs still holding their fill value are unwritten ---------------------
def test_the_output_buffers_are_filled_with_the_value_the_checks_look_for():
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool):
        view, _ = padded_buffer((4,), dtype, "cpu")
        assert (view == fill_value(dtype)).all(), dtype
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        view, _ = padded_buffer((4,), dtype, "cpu")
        assert np.isnan(fill_value(dtype)) and view.isnan().all(), dtype


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8])
def test_an_integer_element_left_at_its_fill_value_fails_within_the_mismatch_ratio(dtype):
    want = torch.ones(200, dtype=dtype)
    got = want.clone()
    got[-1] = fill_value(dtype)  # 1 of 200 (0.5%) is under the 1% ratio
    verdict = compare([got], want, **LOOSE, names=["B"])
    assert not verdict.ok
    assert verdict.message.startswith("unwritten output: 1 elements of B"), verdict.message
    assert "first at flat index 199" in verdict.message
    assert f"fill value {fill_value(dtype)}" in verdict.message


def test_a_bool_element_left_true_where_the_reference_is_false_is_unwritten():
    want = torch.ones(200, dtype=torch.bool)
    want[-1] = False
    got = torch.ones(200, dtype=torch.bool)  # the fill value, True, never overwritten
    verdict = compare([got], want, **LOOSE, names=["B"])
    assert not verdict.ok and verdict.message.startswith("unwritten output: 1 elements of B")


def test_a_kernel_that_computes_the_fill_value_where_the_reference_has_it_passes():
    low = torch.iinfo(torch.int32).min
    want = torch.tensor([low, 1, low], dtype=torch.int32)
    assert compare([want.clone()], want, **EXACT).ok
    assert compare([torch.ones(3, dtype=torch.bool)], torch.ones(3, dtype=torch.bool), **EXACT).ok


def test_without_a_reference_an_integer_fill_value_is_not_called_unwritten():
    # True, or a minimum, is a value a kernel computes: only a reference tells them apart
    assert unwritten("B", torch.ones(4, dtype=torch.bool)) is None
    assert unwritten("B", torch.full((4,), torch.iinfo(torch.int32).min)) is None


def test_a_nan_is_reported_as_what_is_known_of_it():
    got = torch.tensor([1.0, float("nan")])
    verdict = unwritten("B", got, torch.ones(2))
    assert verdict is not None and not verdict.ok
    assert "NaN where the reference is not NaN" in verdict.message
    assert "never written, or computed as NaN" in verdict.message
    assert "left them as filled" not in verdict.message
    alone = unwritten("B", got)
    assert alone is not None and "computed as NaN" in alone.message


# -- a check's bool answer, whatever its type --------------------------------------------------
@pytest.mark.parametrize(
    "false",
    [torch.tensor(False), torch.tensor([False]), np.False_, np.array([False])],
    ids=["tensor0d", "tensor1", "numpy-bool", "numpy-array1"],
)
def test_a_false_of_any_bool_type_fails(false):
    verdict = check_bool(false)
    assert verdict is not None and not verdict.ok
    assert f"ref_prog returned {false!r}" in verdict.message


@pytest.mark.parametrize(
    "true", [True, torch.tensor(True), torch.tensor([True]), np.True_], ids=repr
)
def test_a_true_of_any_bool_type_passes(true):
    assert check_bool(true) == Verdict(True)


def test_an_element_wise_bool_answer_fails_naming_what_came():
    verdict = check_bool(torch.tensor([True, False, True]))
    assert verdict is not None and not verdict.ok
    assert "bool tensor of 3 elements, expected one bool" in verdict.message


def test_other_answers_are_no_verdict():
    assert check_bool(None) is None
    assert check_bool(torch.zeros(1)) is None  # a float tensor: not a bool answer


# -- check_outputs: the verdict of each check ---------------------------------------------------
def session_for(*, ref_checker=False, expected=None, reference=None, **profile) -> RunSession:
    spec = SessionSpec(
        params=(), out_pos=(1,), device="cpu", profile=ProfileArgs(**profile).for_worker()
    )
    return RunSession(
        spec=spec,
        inputs=[torch.arange(8.0)],
        in_pos=(0,),
        expected=expected,
        ref_checker=ref_checker,
        reference=reference,
    )


def verdict_of(session: RunSession, results: list[torch.Tensor]) -> Verdict:
    return check_outputs(session, [], results, ["B"], ())


@pytest.mark.parametrize(
    "checker",
    [
        lambda a, b: (b == a + 1).all(),
        lambda a, b: np.all(b.numpy() == a.numpy() + 1),
    ],
    ids=["tensor", "numpy"],
)
def test_a_checker_ref_prog_returning_a_false_tensor_or_numpy_bool_fails(checker):
    session = session_for(ref_checker=True, ref_prog=checker)
    a = session.inputs[0]
    verdict = verdict_of(session, [a + 5])
    assert not verdict.ok and "ref_prog returned" in verdict.message, verdict
    assert verdict_of(session, [a + 1]).ok


@pytest.mark.parametrize(
    "manual",
    [
        lambda r, e: (r[0] == e[0]).all(),
        lambda r, e: np.all(r[0].numpy() == e[0].numpy()),
    ],
    ids=["tensor", "numpy"],
)
def test_a_manual_check_returning_a_false_tensor_or_numpy_bool_fails(manual):
    a = torch.arange(8.0)
    session = session_for(expected=a + 1, ref_prog=lambda x: x + 1, manual_check_prog=manual)
    verdict = verdict_of(session, [a + 5])
    assert not verdict.ok and "manual_check_prog returned" in verdict.message, verdict
    assert verdict_of(session, [a + 1]).ok


@pytest.mark.parametrize(
    "expected", [torch.tensor(True), np.True_, True], ids=["tensor", "numpy", "python"]
)
def test_a_bool_from_ref_prog_is_the_expected_value_of_a_single_element_output(expected):
    session = session_for(expected=expected, ref_prog=lambda x: (x >= 0).all())
    assert verdict_of(session, [torch.tensor([True])]).ok
    wrong = verdict_of(session, [torch.tensor([False])])
    assert not wrong.ok and "B: 1/1 elements" in wrong.message, wrong


@pytest.mark.parametrize("expected", [torch.tensor(False), np.False_], ids=["tensor", "numpy"])
def test_a_bool_from_ref_prog_for_larger_outputs_is_a_verdict_given_without_them(expected):
    session = session_for(expected=expected, ref_prog=lambda x: bool((x < 0).any()))
    verdict = verdict_of(session, [torch.arange(8.0)])
    assert not verdict.ok and "without seeing the outputs" in verdict.message, verdict


def test_manual_check_without_a_reference_is_skipped_with_a_note():
    calls = []

    def manual(results, expected):
        calls.append(expected)
        torch.testing.assert_close(results[0], expected[0])

    session = session_for(manual_check_prog=manual)  # no ref_prog, no default's results
    verdict = verdict_of(session, [torch.arange(8.0)])
    assert verdict.ok, verdict
    assert calls == []
    assert "manual_check_prog not called" in verdict.note
    assert "no reference" in verdict.note


def test_manual_check_without_a_reference_still_fails_unwritten_output():
    session = session_for(manual_check_prog=lambda r, e: True)
    got = torch.arange(8.0)
    got[3] = float("nan")
    verdict = verdict_of(session, [got])
    assert not verdict.ok and verdict.message.startswith("unwritten output: 1 elements of B")


def test_manual_check_gets_the_default_configs_results_when_there_are_some():
    seen = []
    reference = [torch.arange(8.0)]
    session = session_for(reference=reference, manual_check_prog=lambda r, e: seen.append(e))
    assert verdict_of(session, [torch.arange(8.0)]).ok
    assert len(seen) == 1 and seen[0] is not None and torch.equal(seen[0][0], reference[0])
