"""tileauto.run.buffers: padded clones and outputs between canaries, and the canary check."""

from __future__ import annotations

import pytest
import torch

from tileauto.artifact import ParamSpec
from tileauto.run.buffers import (
    PAD,
    canaries_intact,
    interleave,
    padded_buffer,
    padded_clones,
    padded_outputs,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.uint8]


@pytest.mark.parametrize("dtype", [*DTYPES, torch.bool], ids=str)
def test_padded_buffer_is_a_view_between_canaries(dtype):
    view, buf = padded_buffer((3, 5), dtype, "cpu")
    assert view.shape == (3, 5) and view.dtype == dtype and view.is_contiguous()
    assert buf.shape == (15 + 2 * PAD,)
    assert view.data_ptr() == buf.data_ptr() + PAD * buf.element_size()
    assert (PAD * buf.element_size()) % 64 == 0  # the view keeps the buffer's alignment
    assert canaries_intact(buf)
    view.fill_(1)  # writes inside the view leave the canaries alone
    assert canaries_intact(buf)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("where", ["after the end", "before the start"])
def test_a_write_outside_the_view_breaks_a_canary(dtype, where):
    view, buf = padded_buffer((4, 4), dtype, "cpu")
    index = PAD + view.numel() if where == "after the end" else PAD - 1
    buf[index] = 0
    assert not canaries_intact(buf)


def test_a_bool_canary_catches_a_false_written_outside():
    _, buf = padded_buffer((8,), torch.bool, "cpu")
    buf[-1] = False
    assert not canaries_intact(buf)


def test_an_empty_tensor_has_only_canaries():
    view, buf = padded_buffer((0, 4), torch.float32, "cpu")
    assert view.shape == (0, 4) and buf.numel() == 2 * PAD
    assert canaries_intact(buf)


def test_padded_clones_copy_values_not_storage():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(6, 4, generator=gen)
    b = torch.arange(12, dtype=torch.int32).reshape(3, 4).t()  # not contiguous
    views, bufs = padded_clones([a, 7, b, 0.5])
    assert views[1] == 7 and views[3] == 0.5  # scalars pass through
    assert bufs[1] is None and bufs[3] is None
    for original, view, buf in ((a, views[0], bufs[0]), (b, views[2], bufs[2])):
        assert torch.equal(view, original) and view.dtype == original.dtype
        assert view.is_contiguous()
        assert view.data_ptr() != original.data_ptr()
        assert buf is not None and canaries_intact(buf)
    views[0].zero_()
    assert a.abs().sum() > 0  # the caller's tensor is untouched


def test_padded_outputs_bind_sizes_from_inputs_and_scalars():
    params = (
        ParamSpec("A", ("m", 8), "float32"),
        ParamSpec("n", (), "int32", scalar=True),
        ParamSpec("C", ("m * 2", "n"), "float16"),
        ParamSpec("D", (4,), "int32"),
    )
    ins = [torch.zeros(3, 8), 5]
    views, bufs = padded_outputs(params, [2, 3], ins, "cpu")
    assert [tuple(v.shape) for v in views] == [(6, 5), (4,)]
    assert [v.dtype for v in views] == [torch.float16, torch.int32]
    assert all(canaries_intact(b) for b in bufs)


def test_padded_outputs_bind_a_scalar_by_its_key_not_a_dimension_named_alike():
    # A's length and the scalar are distinct variables both called n: keys n_1 and n
    params = (
        ParamSpec("A", ("n_1",), "float32", renamed=(("n_1", "n"),)),
        ParamSpec("n", (), "int32", scalar=True),
        ParamSpec("B", ("n", "n_1 * 2"), "float32", renamed=(("n_1", "n"),)),
    )
    views, _ = padded_outputs(params, [2], [torch.zeros(3), 5], "cpu")
    assert tuple(views[0].shape) == (5, 6)
    # a scalar renamed apart binds its key
    params = (
        ParamSpec("A", ("n",), "float32"),
        ParamSpec("n", (), "int32", scalar=True, renamed=(("n_1", "n"),)),
        ParamSpec("B", ("n_1", "n"), "float32", renamed=(("n_1", "n"),)),
    )
    views, _ = padded_outputs(params, [2], [torch.zeros(3), 5], "cpu")
    assert tuple(views[0].shape) == (5, 3)


def test_interleave_puts_inputs_and_outputs_in_call_order():
    assert interleave(4, [0, 2], ["a", "c"], [1, 3], ["B", "D"]) == ["a", "B", "c", "D"]
    assert interleave(2, [1], ["x"], [0], ["Y"]) == ["Y", "x"]
    assert interleave(1, [0], [3], [], []) == [3]


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), 2.5])
def test_a_float_scalar_binds_no_size(alpha):
    # only an integer scalar can size a buffer; int(nan) failed every config
    params = (
        ParamSpec("A", ("n",), "float32"),
        ParamSpec("alpha", (), "float32", scalar=True),
        ParamSpec("B", ("n",), "float32"),
    )
    views, _ = padded_outputs(params, [2], [torch.zeros(3), alpha], "cpu")
    assert tuple(views[0].shape) == (3,)
