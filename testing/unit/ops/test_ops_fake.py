"""The op's fake from a signature: output shapes in the op's own (maybe symbolic) sizes."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from tileauto.artifact import ParamSpec
from tileauto.errors import TorchOpError
from tileauto.ops._fake import (
    Signature,
    SignatureMemo,
    check_same_dtypes,
    hint,
    output_shapes,
    problem_values,
    scalar_symbols,
    specialized,
)


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


def _backed(env: ShapeEnv, name: str, value: int) -> torch.SymInt:
    """A symbolic int with an example value, as dynamo makes for a size or an int argument."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic

    source = ConstantSource(name)
    symbol = env.create_symbol(value, source, dynamic_dim=DimDynamic.DYNAMIC)
    return env.create_symintnode(symbol, hint=value, source=source)


def test_the_scalar_arguments_values_in_a_problem_are_guarded_and_the_sizes_are_not():
    env = ShapeEnv()
    n, mode = _backed(env, "n", 8), _backed(env, "mode", 3)
    symbols = scalar_symbols([mode, 2.5, True])
    problem = specialized({"n": n, "mode": mode, "pair": [n, mode * 2]}, symbols)
    assert problem == {"n": n, "mode": 3, "pair": [n, 6]}
    assert isinstance(problem["n"], torch.SymInt)  # a tensor's size stays symbolic
    (guard,) = env.guards  # mode == 3: torch traces again for another mode
    assert guard.expr.free_symbols == symbols
    assert specialized((n, "float32"), set()) == (n, "float32")
    assert len(env.guards) == 1


def test_output_dtypes_that_change_at_twice_the_sizes_are_refused():
    def sig(dtype: str) -> Signature:
        return _sig(ParamSpec("A", (8,), "float32"), ParamSpec("B", (8,), dtype))

    check_same_dtypes("ns::op", sig("float32"), None)  # no symbolic size
    check_same_dtypes("ns::op", sig("float32"), sig("float32"))
    with pytest.raises(TorchOpError, match=r"\['float32'\] at these sizes and \['float64'\]"):
        check_same_dtypes("ns::op", sig("float32"), sig("float64"))
