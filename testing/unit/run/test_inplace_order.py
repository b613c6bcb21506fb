"""``inplace_args`` in any order gives the results in input order, as ``out_idx`` does."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from tileauto.artifact import ParamSpec
from tileauto.run.runner import _inplace_positions

KERNEL = SimpleNamespace(
    params=(ParamSpec("X", (4,), "float32"), ParamSpec("Y", (4,), "float32")), out_idx=()
)


def test_inplace_args_out_of_order_are_sorted_with_a_warning():
    with pytest.warns(UserWarning, match=r"inplace_args=\[1, 0\]: .* write inplace_args=\[0, 1\]"):
        assert _inplace_positions((1, 0), KERNEL) == (0, 1)


@pytest.mark.parametrize("given", [(0, 1), (0, -1), (1, 1), (-1,)])
def test_inplace_args_in_order_are_taken_silently(given):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _inplace_positions(given, KERNEL)
    assert got == tuple(sorted({k % 2 for k in given}))
