"""The op's fake from a signature: output shapes in the op's own (maybe symbolic) sizes."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from tileauto.artifact import ParamSpec
from tileauto.ops._fake import Signature, SignatureMemo, hint, output_shapes, problem_values


def _sig(*params: ParamSpec, out: tuple[int, ...] = (-1,)) -> Signature:
    return Signature(params, tuple(sorted(p % len(params) for p in out)))


def test_static_dims_map_to_the_inputs_sizes_that_have_them():
    sig = _sig(
        ParamSpec("A", (8, 16), "float32"),
        ParamSpec("B", (16, 4), "float32"),
        ParamSpec("C", (8, 4), "float32"),
    )
    env = ShapeEnv()
    m, k, n = (env.create_unbacked_symint() for _ in range(3))
    a = torch.empty(8, 16)  # a stand-in: only .shape is read
    b = torch.empty(16, 4)

    class Sized:
        def __init__(self, shape):
            self.shape = shape

    shapes = output_shapes(sig, [Sized((m, k)), Sized((k, n))], [])
    assert shapes == [(m, n)]
    assert output_shapes(sig, [a, b], []) == [(8, 4)]


def test_a_dim_no_input_has_stays_a_constant_and_problem_values_count():
    sig = _sig(
        ParamSpec("A", (8,), "float32"),
        ParamSpec("O", (8, 3, 5), "float32"),
    )
    x = torch.empty(8)
    assert output_shapes(sig, [x], []) == [(8, 3, 5)]
    assert output_shapes(sig, [x], [5]) == [(8, 3, 5)]


def test_size_variables_and_expressions_follow_their_binding_input():
    sig = _sig(ParamSpec("A", ("n",), "float32"), ParamSpec("B", ("n * 2",), "float32"))
    assert output_shapes(sig, [torch.empty(7)], []) == [(14,)]
    env = ShapeEnv()
    s = env.create_unbacked_symint()

    class Sized:
        shape = (s,)

    (shape,) = output_shapes(sig, [Sized()], [])
    assert str(shape[0]) == str(s * 2)


def test_a_scalar_length_binds_its_variable():
    sig = _sig(
        ParamSpec("n", (), "int32", scalar=True),
        ParamSpec("A", ("n",), "float32"),
        ParamSpec("B", ("n + 1",), "float32"),
    )
    assert output_shapes(sig, [5, torch.empty(5)], []) == [(6,)]


def test_hint_reads_example_values_and_refuses_unbacked_sizes():
    assert hint((3, [4, {"a": 5}])) == (3, (4, {"a": 5}))
    env = ShapeEnv()
    unbacked = env.create_unbacked_symint()
    with pytest.raises(TypeError, match="no example value"):
        hint(unbacked)


def test_problem_values_flatten_positional_and_keyword_arguments():
    assert problem_values((torch.Size([2, 3]), 4), {"dtype": "float32"}) == [2, 3, 4, "float32"]


def test_the_memo_elaborates_once_per_problem():
    calls = []

    def elaborate(args, kwargs):
        calls.append(args)
        return _sig(ParamSpec("A", (1,), "float32"))

    memo = SignatureMemo(elaborate)
    assert memo.get("k", (1,), {}) is memo.get("k", (1,), {})
    known = _sig(ParamSpec("B", (2,), "float32"))
    memo.put("other", known)
    assert memo.get("other", (2,), {}) is known
    assert calls == [(1,)]


def test_the_doubled_signature_tells_sizes_constants_and_the_unwritable():
    env = ShapeEnv()
    m = env.create_unbacked_symint()

    class Sized:
        shape = (m,)

    def sig(n: int, out: tuple[int, ...]) -> Signature:
        return _sig(ParamSpec("A", (n,), "float32"), ParamSpec("B", out, "float32"))

    # B follows A (doubles with it), B's 3 is a constant although A is 3 long here
    assert output_shapes(sig(3, (3,)), [Sized()], [], doubled=sig(6, (6,))) == [(m,)]
    assert output_shapes(sig(3, (3,)), [Sized()], [], doubled=sig(6, (3,))) == [(3,)]
    with pytest.raises(ValueError, match="dim 0 is 6 at these sizes and 12 at twice"):
        output_shapes(sig(3, (6,)), [Sized()], [], doubled=sig(6, (12,)))
