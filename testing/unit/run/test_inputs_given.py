"""Inputs given to a tuning that no config could run with, refused (or fixed) before any runs.

A whole float for an integer scalar, a length passed by value that disagrees with a tensor's
size, tensors without data (meta) or not strided (sparse), and the threads a
``set_autotune_inputs`` block reaches.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tileauto.artifact import ParamSpec
from tileauto.errors import InputSupplyError
from tileauto.run.inputs import (
    captured_inputs,
    inputs_of_this_thread,
    make_inputs,
    set_autotune_inputs,
)

SIZED = (
    ParamSpec("A", ("n",), "float32"),
    ParamSpec("n", (), "int32", scalar=True),
    ParamSpec("B", ("n",), "float32"),
)


def _given(values, params=SIZED, in_pos=(0, 1, 2)):
    return make_inputs(
        params, in_pos, captured=values, supply_prog=None, supply_type=None, seed=0, device="cpu"
    )


def _supplied(values, params=SIZED, in_pos=(0, 1)):
    return make_inputs(
        params,
        in_pos,
        captured=None,
        supply_prog=lambda records: values,
        supply_type=None,
        seed=0,
        device="cpu",
    )


# -- an integer scalar given as a whole float is passed as an int ---------------------------------
@pytest.mark.parametrize(
    "value", [3.0, torch.tensor(3.0), torch.tensor([3.0], dtype=torch.float64)]
)
def test_a_whole_float_for_an_integer_scalar_is_passed_as_an_int(value):
    # TVM refuses a float for an int32 argument, in every config alike
    got = _given([torch.zeros(3), value, torch.zeros(3)])[1]
    assert got == 3 and type(got) is int


def test_a_float_scalar_keeps_its_float():
    params = (ParamSpec("A", (4,), "float32"), ParamSpec("alpha", (), "float32", scalar=True))
    got = _given([torch.zeros(4), 2.5], params, (0, 1))[1]
    assert got == 2.5 and type(got) is float


# -- a length passed by value binds the size variable it is ----------------------------------------
@pytest.mark.parametrize("given", [_given, _supplied], ids=["captured", "supply_prog"])
def test_a_scalar_length_that_disagrees_with_a_tensor_is_refused_naming_both(given):
    values = [torch.zeros(64), 32, torch.zeros(64)]
    with pytest.raises(
        InputSupplyError,
        match=r"the size n is 32 in input 1 \(n\), passed by value but 64 in input 0 \(A\)",
    ):
        given(values if given is _given else values[:2])


def test_a_scalar_length_that_agrees_is_taken():
    got = _given([torch.zeros(8), 8.0, torch.zeros(8)])
    assert got[1] == 8 and type(got[1]) is int


# -- tensors the tuning cannot copy -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("tensor", "says"),
    [
        (torch.empty(8, device="meta"), "argument 1 is a meta tensor, which holds no data"),
        (torch.eye(8).to_sparse(), "argument 1 has the layout torch.sparse_coo"),
    ],
    ids=["meta", "sparse"],
)
def test_a_tensor_without_data_is_refused_when_the_block_opens_naming_it(tensor, says):
    with pytest.raises(InputSupplyError, match=says), set_autotune_inputs(torch.zeros(8), tensor):
        pass
    assert captured_inputs() is None


def test_a_meta_tensor_from_supply_prog_is_refused_naming_it():
    params = (ParamSpec("A", (8,), "float32"), ParamSpec("B", (8,), "float32"))
    with pytest.raises(InputSupplyError, match=r"supply_prog: input 0 \(A\) is a meta tensor"):
        _supplied([torch.empty(8, device="meta")], params, (0,))


# -- threads -------------------------------------------------------------------------------------
def test_a_pool_thread_tunes_with_the_block_open_in_the_thread_that_submitted():
    a = torch.ones(4)
    with set_autotune_inputs(a), ThreadPoolExecutor(1) as pool:
        seen = pool.submit(captured_inputs).result()
    assert seen is not None and seen[0] is a
    with ThreadPoolExecutor(1) as pool:  # closed: nothing left behind
        assert pool.submit(captured_inputs).result() is None


def test_inputs_of_this_thread_are_not_another_threads():
    # a torch_op tuning on its own arguments: an unrelated tuning started meanwhile in another
    # thread must make its own inputs, not take the op's
    a = torch.ones(4)
    with inputs_of_this_thread(a), ThreadPoolExecutor(1) as pool:
        assert captured_inputs()[0] is a
        assert pool.submit(captured_inputs).result() is None


def test_a_pool_thread_gets_the_innermost_block_of_the_other_thread():
    a, b = torch.ones(4), torch.zeros(4)
    with set_autotune_inputs(a), set_autotune_inputs(b), ThreadPoolExecutor(1) as pool:
        assert pool.submit(captured_inputs).result()[0] is b


def _in_thread_with_block(tensor, opened, release, seen):
    def body():
        with set_autotune_inputs(tensor):
            opened.set()
            release.wait()
            seen.append(captured_inputs()[0])

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_two_threads_with_blocks_of_their_own_each_get_their_own_and_a_third_is_warned():
    a, b = torch.ones(4), torch.zeros(4)
    release = threading.Event()
    opened_a, opened_b = threading.Event(), threading.Event()
    seen_a: list = []
    seen_b: list = []
    first = _in_thread_with_block(a, opened_a, release, seen_a)
    second = _in_thread_with_block(b, opened_b, release, seen_b)
    try:
        assert opened_a.wait(60) and opened_b.wait(60)
        with pytest.warns(UserWarning, match="blocks are open in 2 other threads"):
            assert captured_inputs() is None  # which one is meant cannot be told
        with set_autotune_inputs(torch.full((4,), 7.0)):
            assert float(captured_inputs()[0][0]) == 7.0  # this thread's own block wins
    finally:
        release.set()
        first.join(60)
        second.join(60)
    assert seen_a[0] is a and seen_b[0] is b
