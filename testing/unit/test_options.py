"""Tests of tileauto.options: bad values fail when the record is made, naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from tileauto.options import CompileArgs, ProfileArgs


@pytest.mark.parametrize("name", ["rtol", "atol"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, "0.1", None])
def test_tolerances_must_be_finite_numbers(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be a finite number >= 0, got"):
        ProfileArgs(**{name: value})


@pytest.mark.parametrize("value", ["0.5", float("nan"), 1.5, -0.1, None, True])
def test_mismatched_ratio_must_be_a_number_in_0_1(value):
    with pytest.raises(ValueError, match=r"max_mismatched_ratio must be a number in \[0, 1\]"):
        ProfileArgs(max_mismatched_ratio=value)


def test_numpy_numbers_are_accepted_as_tolerances():
    args = ProfileArgs(
        rtol=np.float32(1e-3), atol=np.float64(0), max_mismatched_ratio=np.float64(0)
    )
    assert args.rtol == pytest.approx(1e-3)


def test_backend_names():
    assert ProfileArgs(backend="cupti").backend == "cupti"
    with pytest.raises(ValueError, match="backend must be one of"):
        ProfileArgs(backend="nvtx")


def test_has_check():
    assert not ProfileArgs().has_check
    assert ProfileArgs(ref_prog=lambda a: a).has_check
    assert not ProfileArgs(ref_prog=lambda a: a, skip_check=True).has_check


def test_compile_args_out_idx():
    assert CompileArgs(out_idx=-1).out_idx == (-1,)
    with pytest.raises(TypeError, match="out_idx must be"):
        CompileArgs(out_idx="C")
