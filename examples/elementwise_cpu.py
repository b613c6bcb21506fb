"""Fused elementwise kernel for the CPU: the SwiGLU gate ``out = silu(gate) * up``.

``silu(g) = g / (1 + exp(-g))``, so one pass reads two tensors and writes one, where eager
torch runs two kernels and a temporary. The factory builds it with TE (``exp`` is TVM's
polynomial ``topi.fast_exp``, which vectorizes; plain ``te.exp`` becomes one libm call per
element) and schedules it with ``tvm.s_tir.Schedule``:

* the (M, N) index space is fused into one flat loop of ``M * N`` elements;
* that loop is partitioned into a main part, a multiple of ``vec`` elements, and a scalar tail
  of fewer than ``vec`` elements, so any M and N work without predicated vector code;
* the main part is split into chunks of ``block`` elements (one parallel task each), then
  ``unroll`` vectors of ``vec`` lanes.

Run ``python examples/elementwise_cpu.py`` to check it against torch and see how much the
configs differ (as a script it sets ``TVM_NUM_THREADS`` to the number of cores unless set).
"""

from __future__ import annotations

import sys

import _common
import torch
import tvm
from _common import check_shape
from tvm import s_tir, te, topi

import tileauto


def silu_mul(
    M: int,
    N: int,
    vec: int = 16,
    block: int = 16384,
    unroll: int = 2,
    parallel: bool = True,
    dtype: str = "float32",
) -> tvm.tirx.PrimFunc:
    """Return the PrimFunc ``main(G, U, O)`` computing ``O = silu(G) * U`` for (M, N) tensors.

    Args:
        M, N: tensor shape (any positive ints; 1-D data is ``M = 1``).
        vec: vector width (lanes) of the innermost loop.
        block: elements per parallel task (rounded up to a multiple of ``vec * unroll``).
        unroll: vectors per unrolled step.
        parallel: spread the chunks over the TVM thread pool.
        dtype: element type.
    """
    check_shape(M, N)
    if vec < 1 or unroll < 1 or block < 1:
        raise ValueError(f"vec, unroll and block must be positive: {vec=}, {unroll=}, {block=}")
    G = te.placeholder((M, N), dtype, name="G")
    U = te.placeholder((M, N), dtype, name="U")
    neg = te.compute((M, N), lambda i, j: -G[i, j], name="neg")
    e = topi.fast_exp(neg)
    one = tvm.tirx.const(1, dtype)
    Out = te.compute((M, N), lambda i, j: G[i, j] * U[i, j] / (one + e[i, j]), name="O")

    sch = s_tir.Schedule(te.create_prim_func([G, U, Out]))
    out = sch.get_sblock("O")
    for blk in sch.get_producers(out):  # exp(-g): computed where it is used
        for producer in sch.get_producers(blk):
            sch.compute_inline(producer)
        sch.compute_inline(blk)
    flat = sch.fuse(*sch.get_loops(out))
    n = M * N
    n_main = n // vec * vec
    if 0 < n_main < n:  # the scalar tail gets its own loop, so the main part needs no predicate
        flat, _tail = sch.loop_partition(flat, [n_main, None])
    if n_main:
        per_task = max(1, block // (vec * unroll))
        task, _, unr, lanes = sch.split(flat, [None, per_task, unroll, vec])
        sch.vectorize(lanes)
        sch.unroll(unr)
        if parallel:
            sch.parallel(task)
    return sch.mod["main"]


swiglu = tileauto.jit(out_idx=[-1], target="llvm")(silu_mul)


def configs(M: int, N: int) -> list[dict]:
    """16 candidates: vector width, task size, unroll and serial vs parallel."""
    n = M * N
    out = []
    for vec, block, unroll, parallel in [
        (16, 16384, 2, True),
        (16, 4096, 2, True),
        (16, 65536, 2, True),
        (16, 262144, 1, True),
        (16, 16384, 1, True),
        (16, 16384, 4, True),
        (8, 16384, 2, True),
        (8, 4096, 4, True),
        (8, 65536, 1, True),
        (32, 16384, 1, True),
        (32, 65536, 2, True),
        (4, 16384, 1, True),
        (4, 4096, 4, True),
        (16, 16384, 2, False),
        (8, 16384, 2, False),
        (4, 16384, 1, False),
    ]:
        block = max(vec * unroll, min(block, n))  # a task larger than the tensor is one task
        cfg = {"vec": vec, "block": block, "unroll": unroll, "parallel": parallel}
        if cfg not in out:
            out.append(cfg)
    return out


get_configs = configs


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


def main(argv: list[str] | None = None) -> int:
    (M, N), show_all = _common.cpu_args(argv, __doc__)
    torch.manual_seed(0)
    gate = torch.randn(M, N) * 4
    up = torch.randn(M, N)
    gbytes = 3 * M * N * gate.element_size() / 1e9
    return _common.cpu_check_and_time(
        swiglu,
        (M, N),
        [gate, up],
        reference,
        configs(M, N),
        show_all,
        header=f"silu(gate) * up, {M}x{N}: default config matches torch",
        baseline="torch silu(g) * u",
        tol=dict(rtol=1e-5, atol=1e-5),
        width=44,
        rate=lambda ms: f"{gbytes / ms * 1e3:6.1f} GB/s",
    )


if __name__ == "__main__":
    _common.use_all_cores()
    sys.exit(main())
