"""A real LLVM kernel with two distinct size variables that are both called ``n``."""

from __future__ import annotations

import tvm
from tvm import s_tir, te


def two_sizes_named_n(vec: int = 4) -> tvm.tirx.PrimFunc:
    """``S = 2 * A`` (A of length n, split by ``vec``) and ``T = B`` with every element twice
    (B of length n', another variable called n)."""
    n, m = te.var("n"), te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((m,), "float32", name="B")
    s = te.compute((n,), lambda i: a[i] * tvm.tirx.const(2.0, "float32"), name="S")
    t = te.compute((m * 2,), lambda i: b[tvm.tirx.floordiv(i, 2)], name="T")
    sch = s_tir.Schedule(te.create_prim_func([a, b, s, t]))
    (i,) = sch.get_loops(sch.get_sblock("S"))
    sch.split(i, [None, vec])
    return sch.mod["main"]
