"""Row softmax for the CPU: ``out[i, :] = softmax(x[i, :])`` over the last dim of an (M, N) tensor.

Numerically stable: ``e = exp(x - max(x))`` then ``out = e / sum(e)``. Built with TE (``exp``
is TVM's polynomial ``topi.fast_exp``, which vectorizes) and scheduled with
``tvm.s_tir.Schedule``:

* rows are split into chunks of ``rows`` rows, one parallel task each; every stage is
  ``compute_at`` into the row loop, so a row is read from memory once and its ``e`` stays in a
  row-sized scratch buffer while the row is in cache;
* the two reductions (max, sum) are written as two stages: a partial reduction into
  ``vec * unroll`` lanes (``unroll`` independent vector accumulators, vectorized over ``vec``),
  then a short scalar reduction of those lanes and of the ``N % (vec * unroll)`` tail elements;
* the elementwise loops (exp, scale) are partitioned into a vectorized main part and a scalar
  tail of fewer than ``vec`` elements, so any N works without predicated vector code.

Run ``python examples/softmax_cpu.py`` to check it against
``torch.softmax`` and see how much the configs differ (as a script it
sets ``TVM_NUM_THREADS`` to the number of cores unless set).
"""

from __future__ import annotations

import sys

import _common
import torch
import tvm
from _common import check_shape, row_reduce, schedule_partial, vectorize_row
from tvm import s_tir, te, topi

import tileauto


def softmax(
    M: int,
    N: int,
    vec: int = 16,
    rows: int = 4,
    unroll: int = 2,
    parallel: bool = True,
    dtype: str = "float32",
) -> tvm.tirx.PrimFunc:
    """Return the PrimFunc ``main(X, O)`` computing a softmax over each row of X (M, N).

    Args:
        M, N: tensor shape (any positive ints).
        vec: vector width (lanes) of the inner loops.
        rows: rows per parallel task.
        unroll: independent vector accumulators in the max and sum reductions.
        parallel: spread the row chunks over the TVM thread pool.
        dtype: element type.
    """
    check_shape(M, N)
    if vec < 1 or rows < 1 or unroll < 1:
        raise ValueError(f"vec, rows and unroll must be positive: {vec=}, {rows=}, {unroll=}")
    X = te.placeholder((M, N), dtype, name="X")
    width = vec * unroll
    mx, mx_part = row_reduce("mx", te.max, lambda i, j: X[i, j], M, N, width)
    shifted = te.compute((M, N), lambda i, j: X[i, j] - mx[i], name="shifted")
    e = topi.fast_exp(shifted)
    s, s_part = row_reduce("s", te.sum, lambda i, j: e[i, j], M, N, width)
    one = tvm.tirx.const(1, dtype)
    Out = te.compute((M, N), lambda i, j: e[i, j] * (one / s[i]), name="O")

    sch = s_tir.Schedule(te.create_prim_func([X, Out]))
    exp_block = sch.get_producers(sch.get_sblock("s_part" if s_part is not None else "s"))[0]
    sch.compute_inline(sch.get_sblock("shifted"))
    out = sch.get_sblock("O")
    i, j = sch.get_loops(out)
    task, row = sch.split(i, [None, rows])
    if parallel:
        sch.parallel(task)
    # Producers move under the row loop, last producer first.
    stages = ["s", "s_part", exp_block, "mx", "mx_part"]
    for stage in stages:
        if stage in ("s_part", "mx_part") and s_part is None:
            continue
        blk = sch.get_sblock(stage) if isinstance(stage, str) else stage
        sch.compute_at(blk, row)
    vectorize_row(sch, sch.get_loops(out)[-1], N, vec)
    vectorize_row(sch, sch.get_loops(exp_block)[-1], N, vec)
    if s_part is not None:
        schedule_partial(sch, sch.get_sblock("mx_part"), vec)
        schedule_partial(sch, sch.get_sblock("s_part"), vec)
    return sch.mod["main"]


softmax_kernel = tileauto.jit(out_idx=[-1], target="llvm")(softmax)


def configs(M: int, N: int) -> list[dict]:
    """16 candidates: vector width, rows per task, accumulators, serial vs parallel."""
    return _common.row_configs(M)


get_configs = configs


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def main(argv: list[str] | None = None) -> int:
    (M, N), show_all = _common.cpu_args(argv, __doc__)
    torch.manual_seed(0)
    x = torch.randn(M, N) * 4
    gbytes = 2 * M * N * x.element_size() / 1e9
    return _common.cpu_check_and_time(
        softmax_kernel,
        (M, N),
        [x],
        reference,
        configs(M, N),
        show_all,
        header=f"softmax {M}x{N}: default config matches torch.softmax",
        baseline="torch.softmax",
        tol=dict(rtol=1e-5, atol=1e-6),
        width=40,
        rate=lambda ms: f"{gbytes / ms * 1e3:6.1f} GB/s",
    )


if __name__ == "__main__":
    _common.use_all_cores()
    sys.exit(main())
