"""``num_threads`` takes numpy ints as every other count option does, kept as Python's int."""

from __future__ import annotations

import numpy as np
import pytest

import tileauto
from tileauto.options import ProfileArgs


def test_num_threads_takes_a_numpy_int_and_keeps_a_python_int():
    args = ProfileArgs(num_threads=np.int64(1))
    assert args.num_threads == 1 and type(args.num_threads) is int
    tileauto.autotune(configs=[{}], num_threads=np.int32(1))  # accepted at the decorator too


@pytest.mark.parametrize("bad", [np.int64(0), np.float64(1.0), True, np.bool_(True), "1"])
def test_num_threads_still_refuses_what_is_no_count(bad):
    with pytest.raises(ValueError, match=r"num_threads must be None .* an int >= 1, got"):
        ProfileArgs(num_threads=bad)
