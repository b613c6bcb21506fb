"""RMSNorm for the CPU: ``out[i, :] = x[i, :] / sqrt(mean(x[i, :] ** 2) + eps) * weight``.

Over the last dim of an (M, N) tensor, with a weight of N elements and ``eps = 1e-6``. Built
with TE and scheduled with ``tvm.s_tir.Schedule``:

* rows are split into chunks of ``rows`` rows, one parallel task each; the sum of squares and
  the scale are ``compute_at`` into the row loop, so a row is read from memory once and then
  re-read from cache;
* the sum of squares is a two-stage reduction: a partial sum into ``vec * unroll`` lanes
  (``unroll`` independent vector accumulators, vectorized over ``vec``), then a short scalar
  sum of those lanes and of the ``N % (vec * unroll)`` tail elements;
* the normalizing loop is partitioned into a vectorized main part and a scalar tail of fewer
  than ``vec`` elements, so any N works without predicated vector code.

Run ``python examples/rmsnorm_cpu.py`` to check it against
``torch.nn.functional.rms_norm`` and see how much the configs differ (as a script it
sets ``TVM_NUM_THREADS`` to the number of cores unless set).
"""

from __future__ import annotations

import sys

import _common
import torch
import tvm
from _common import check_shape, row_reduce, schedule_partial, vectorize_row
from tvm import s_tir, te

import tileauto


def rmsnorm(
    M: int,
    N: int,
    vec: int = 16,
    rows: int = 4,
    unroll: int = 2,
    parallel: bool = True,
    eps: float = 1e-6,
    dtype: str = "float32",
) -> tvm.tirx.PrimFunc:
    """Return the PrimFunc ``main(X, W, O)``: RMSNorm of each row of X (M, N), weight W (N,).

    Args:
        M, N: tensor shape (any positive ints).
        vec: vector width (lanes) of the inner loops.
        rows: rows per parallel task.
        unroll: independent vector accumulators in the sum of squares.
        parallel: spread the row chunks over the TVM thread pool.
        eps: added to the mean square before the square root.
        dtype: element type (the sum of squares is accumulated in it too).
    """
    check_shape(M, N)
    if vec < 1 or rows < 1 or unroll < 1:
        raise ValueError(f"vec, rows and unroll must be positive: {vec=}, {rows=}, {unroll=}")
    X = te.placeholder((M, N), dtype, name="X")
    W = te.placeholder((N,), dtype, name="W")
    width = vec * unroll
    ss, ss_part = row_reduce("ss", te.sum, lambda i, j: X[i, j] * X[i, j], M, N, width)
    inv_n = tvm.tirx.const(1.0 / N, dtype)
    scale = te.compute(
        (M,), lambda i: te.rsqrt(ss[i] * inv_n + tvm.tirx.const(eps, dtype)), name="scale"
    )
    Out = te.compute((M, N), lambda i, j: X[i, j] * scale[i] * W[j], name="O")

    sch = s_tir.Schedule(te.create_prim_func([X, W, Out]))
    out = sch.get_sblock("O")
    i, _ = sch.get_loops(out)
    task, row = sch.split(i, [None, rows])
    if parallel:
        sch.parallel(task)
    # Producers move under the row loop, last producer first.
    for stage in ("scale", "ss", "ss_part") if ss_part is not None else ("scale", "ss"):
        sch.compute_at(sch.get_sblock(stage), row)
    vectorize_row(sch, sch.get_loops(out)[-1], N, vec)
    if ss_part is not None:
        schedule_partial(sch, sch.get_sblock("ss_part"), vec)
    return sch.mod["main"]


rmsnorm_kernel = tileauto.jit(out_idx=[-1], target="llvm")(rmsnorm)


def configs(M: int, N: int) -> list[dict]:
    """16 candidates: vector width, rows per task, accumulators, serial vs parallel."""
    return _common.row_configs(M)


get_configs = configs


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def main(argv: list[str] | None = None) -> int:
    (M, N), show_all = _common.cpu_args(argv, __doc__)
    torch.manual_seed(0)
    x = torch.randn(M, N) * 4
    weight = torch.rand(N) + 0.5
    gbytes = 2 * M * N * x.element_size() / 1e9
    return _common.cpu_check_and_time(
        rmsnorm_kernel,
        (M, N),
        [x, weight],
        reference,
        configs(M, N),
        show_all,
        header=f"rmsnorm {M}x{N}: default config matches torch rms_norm",
        baseline="torch rms_norm",
        tol=dict(rtol=1e-5, atol=1e-5),
        width=40,
        rate=lambda ms: f"{gbytes / ms * 1e3:6.1f} GB/s",
    )


if __name__ == "__main__":
    _common.use_all_cores()
    sys.exit(main())
