"""Tests of tileauto.jit.compiler's parameter records: size variables keyed by identity."""

from __future__ import annotations

import kernels
import pytest
import tvm
from tvm import te

from tileauto.errors import CompileError
from tileauto.jit.compiler import describe_params


def test_distinct_size_variables_named_alike_get_distinct_keys():
    a, b, s, t = describe_params(kernels.two_sizes_named_n())
    assert (a.shape, b.shape, s.shape, t.shape) == (("n",), ("n_1",), ("n",), ("n_1 * 2",))
    # the key is the identity, the name is for display
    assert a.renamed == () and b.renamed == (("n_1", "n"),) and t.renamed == (("n_1", "n"),)
    assert b.display_shape == ("n",) and t.display_shape == ("n * 2",)


def test_a_scalar_keeps_its_name_and_a_dimension_named_alike_is_renamed():
    a, n, b = describe_params(kernels.scalar_named_like_a_dim())
    # as TVMScript prints it: parameters are named first
    assert n.scalar and n.name == "n" and n.size_var == "n" and n.renamed == ()
    assert a.shape == ("n_1",) and a.renamed == (("n_1", "n"),)
    assert b.shape == ("n",)


def test_one_variable_used_in_several_buffers_keeps_one_key():
    specs = describe_params(kernels.dyn_add())
    assert [p.shape for p in specs] == [("n",)] * 3
    assert all(p.renamed == () for p in specs)


def test_a_renamed_key_skips_the_names_the_kernel_already_uses():
    n, m, n_1 = te.var("n"), te.var("n"), te.var("n_1")
    bufs = [te.placeholder((v,), "float32", name=x) for v, x in ((n, "A"), (m, "B"), (n_1, "C"))]
    out = te.compute((n,), lambda i: bufs[0][i], name="D")
    specs = describe_params(te.create_prim_func([*bufs, out]))
    assert [p.shape for p in specs] == [("n",), ("n_2",), ("n_1",), ("n",)]


def test_an_expression_tileauto_cannot_rename_is_a_compile_error_naming_it():
    n, m = te.var("n"), te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((tvm.tirx.max(m, 1),), "float32", name="B")
    with pytest.raises(CompileError, match=r"parameter B: dimension 0 .*named 'n'.*distinct names"):
        describe_params(te.create_prim_func([a, b]))
