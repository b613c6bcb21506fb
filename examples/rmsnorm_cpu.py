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

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import tvm
from tvm import s_tir, te

try:
    import tileauto
except ImportError:  # a source checkout that is not installed: use the repo next to us
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import tileauto


def _row_reduce(name, combine, value, M, N, width):
    """``combine`` over the last axis of ``value(i, j)`` as two TE stages.

    Stage ``<name>_part[i, w]`` reduces columns ``w, w + width, ...`` of the first
    ``N // width * width`` columns (vectorizable over ``w``); stage ``<name>[i]`` reduces those
    ``width`` partials and the remaining tail columns. Returns ``(result, part or None)``.
    """
    nk = N // width
    if nk < 2 or width < 2:  # a row of less than two steps: a plain reduction
        r = te.reduce_axis((0, N), name=f"{name}_r")
        return te.compute((M,), lambda i: combine(value(i, r), axis=r), name=name), None
    ko = te.reduce_axis((0, nk), name=f"{name}_ko")
    part = te.compute(
        (M, width), lambda i, w: combine(value(i, ko * width + w), axis=ko), name=f"{name}_part"
    )
    tail = N - nk * width
    r = te.reduce_axis((0, width + tail), name=f"{name}_r")
    if tail == 0:
        return te.compute((M,), lambda i: combine(part[i, r], axis=r), name=name), part

    def finish(i):
        # r < width: a partial; r >= width: tail column nk * width + (r - width).
        # The clamps keep both loads in bounds; only the selected one is used.
        from_part = part[i, te.min(r, width - 1)]
        from_tail = value(i, nk * width + te.max(r - width, 0))
        return combine(te.if_then_else(r < width, from_part, from_tail), axis=r)

    return te.compute((M,), finish, name=name), part


def _vectorize_row(sch, loop, extent, vec):
    """Vectorize a row loop: a main part of whole vectors, then a scalar tail loop."""
    main = extent // vec * vec
    if main == 0:
        return
    if main < extent:
        loop, _tail = sch.loop_partition(loop, [main, None])
    _, lanes = sch.split(loop, [None, vec])
    sch.vectorize(lanes)


def _schedule_partial(sch, block, vec):
    """Put the lanes of a ``*_part`` stage innermost and vectorize them."""
    w, ko = sch.get_loops(block)[-2:]
    sch.reorder(ko, w)
    acc, lanes = sch.split(w, [None, vec])
    sch.unroll(acc)
    sch.vectorize(lanes)
    sch.decompose_reduction(block, ko)


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
    if M < 1 or N < 1:
        raise ValueError(f"M and N must be positive, got M={M!r}, N={N!r}")
    if vec < 1 or rows < 1 or unroll < 1:
        raise ValueError(f"vec, rows and unroll must be positive: {vec=}, {rows=}, {unroll=}")
    X = te.placeholder((M, N), dtype, name="X")
    W = te.placeholder((N,), dtype, name="W")
    width = vec * unroll
    ss, ss_part = _row_reduce("ss", te.sum, lambda i, j: X[i, j] * X[i, j], M, N, width)
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
    _vectorize_row(sch, sch.get_loops(out)[-1], N, vec)
    if ss_part is not None:
        _schedule_partial(sch, sch.get_sblock("ss_part"), vec)
    return sch.mod["main"]


rmsnorm_kernel = tileauto.jit(out_idx=[-1], target="llvm")(rmsnorm)


def configs(M: int, N: int) -> list[dict]:
    """16 candidates: vector width, rows per task, accumulators, serial vs parallel."""
    out = []
    for vec, rows, unroll, parallel in [
        (16, 4, 2, True),
        (16, 1, 2, True),
        (16, 16, 2, True),
        (16, 64, 2, True),
        (16, 4, 1, True),
        (16, 4, 4, True),
        (16, 16, 4, True),
        (8, 4, 2, True),
        (8, 4, 4, True),
        (8, 16, 1, True),
        (32, 4, 1, True),
        (32, 16, 2, True),
        (4, 4, 4, True),
        (4, 16, 1, True),
        (16, 4, 2, False),
        (8, 4, 1, False),
    ]:
        cfg = {"vec": vec, "rows": min(rows, M), "unroll": unroll, "parallel": parallel}
        if cfg not in out:
            out.append(cfg)
    return out


get_configs = configs


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def _bench(fn, *args, warmup: int = 3, reps: int = 20) -> float:
    """Median wall time of ``fn(*args)`` in milliseconds (perf_counter loop)."""
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="M = N (default 2048)")
    parser.add_argument("--shape", type=int, nargs=2, metavar=("M", "N"), help="tensor shape")
    parser.add_argument("--all", action="store_true", help="time every config of configs()")
    args = parser.parse_args(argv)
    M, N = args.shape or (args.size, args.size)
    torch.manual_seed(0)
    x = torch.randn(M, N) * 4
    weight = torch.rand(N) + 0.5
    ref = reference(x, weight)
    t_torch = _bench(reference, x, weight)  # before any TVM thread pool spins

    out = rmsnorm_kernel(M, N)(x, weight)  # default config
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    print(f"rmsnorm {M}x{N}: default config matches torch rms_norm; "
          f"TVM threads {tvm.runtime.num_threads()}")  # fmt: skip
    gbytes = 2 * M * N * x.element_size() / 1e9
    print(f"{'torch rms_norm':>40}: {t_torch:8.3f} ms {gbytes / t_torch * 1e3:6.1f} GB/s")
    candidates = configs(M, N)
    shown = [{}] + (candidates if args.all else candidates[:: max(1, len(candidates) // 5)])
    for cfg in shown:
        kern = rmsnorm_kernel(M, N, **cfg)
        torch.testing.assert_close(kern(x, weight), ref, rtol=1e-5, atol=1e-5)
        ms = _bench(kern, x, weight)
        label = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        print(f"{label:>40}: {ms:8.3f} ms {gbytes / ms * 1e3:6.1f} GB/s")
    return 0


if __name__ == "__main__":
    # TVM's pool uses half the x86 cores unless told (it assumes hyper-threads): use them all.
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    sys.exit(main())
