"""Row softmax for CUDA GPUs over the last dim of an (M, N) tensor, numerically stable.

``out[i, :] = exp(x[i, :] - max(x[i, :])) / sum(exp(x[i, :] - max(x[i, :])))``. Built with TE
and scheduled with ``tvm.s_tir.Schedule``, one row per thread block (``blockIdx.x``):

* the max and the sum are ``compute_at`` into the row and their buffers set to "shared"; their
  reduction loops are split into ``[steps, threads, vec]``, ``threads`` bound to
  ``threadIdx.x``: each thread reduces its ``vec``-element pieces serially, then TVM's
  cross-thread reduction combines the threads with warp shuffles and a shared-memory stage;
* the output loop is split the same way with ``vec`` consecutive elements per thread (a
  float4 for ``vec = 4``), vectorized when ``vec`` divides N and predicated per lane otherwise.

``exp`` is recomputed in the output loop instead of being stored, so each row is read three
times (the last two from cache) and written once.

Without a GPU, ``python examples/softmax_cuda.py`` compiles every config of ``configs()`` for
``sm_90``, checks the PTX with nvcc when it is installed and prints the size of the CUDA source;
with one, it also runs them and checks against ``torch.softmax``.
"""

from __future__ import annotations

import sys

import _cuda_common
import torch
import tvm
from _common import check_shape

# "X as X": re-exported, for callers and the tests (e.g. gemm_cuda.ptx_of)
from _cuda_common import COMPILE_TARGET as COMPILE_TARGET
from _cuda_common import GPU_LIMITS
from _cuda_common import compile_cuda_source as compile_cuda_source
from _cuda_common import lowered_gpu_ok as lowered_gpu_ok
from _cuda_common import ptx_of as ptx_of
from tvm import s_tir, te

import tileauto


def softmax(M: int, N: int, threads: int = 256, vec: int = 4, dtype: str = "float32"):
    """Return the PrimFunc ``main(X, O)``: softmax over each row of X (M, N) on a CUDA device.

    Args:
        M, N: tensor shape (any positive ints).
        threads: threads per block (one block per row; a multiple of 32, at most 1024).
        vec: consecutive elements per thread and step (vector width; at most 16 bytes).
        dtype: element type.
    """
    check_shape(M, N)
    itemsize = tvm.runtime.DataType(dtype).bits // 8
    if threads % 32 or not 32 <= threads <= GPU_LIMITS["max_threads_per_block"]:
        raise ValueError(
            f"threads={threads} must be a multiple of 32 in [32, "
            f"{GPU_LIMITS['max_threads_per_block']}] (whole warps for the shuffle reduction)"
        )
    if vec < 1 or vec * itemsize > GPU_LIMITS["max_vector_bytes"]:
        raise ValueError(f"vec={vec} must be 1..{GPU_LIMITS['max_vector_bytes'] // itemsize}")
    X = te.placeholder((M, N), dtype, name="X")
    k = te.reduce_axis((0, N), name="k")
    mx = te.compute((M,), lambda i: te.max(X[i, k], axis=k), name="mx")
    k2 = te.reduce_axis((0, N), name="k2")
    s = te.compute((M,), lambda i: te.sum(te.exp(X[i, k2] - mx[i]), axis=k2), name="s")
    Out = te.compute((M, N), lambda i, j: te.exp(X[i, j] - mx[i]) / s[i], name="O")

    sch = s_tir.Schedule(te.create_prim_func([X, Out]))
    out = sch.get_sblock("O")
    row, col = sch.get_loops(out)
    sch.bind(row, "blockIdx.x")
    # Lanes split off first: when vec divides N the bounds check does not depend on the lane.
    vectors, lanes = sch.split(col, [None, vec])
    _, tx = sch.split(vectors, [None, threads])
    sch.bind(tx, "threadIdx.x")
    if N % vec == 0:
        sch.vectorize(lanes)
    else:
        sch.unroll(lanes)
    for name in ("s", "mx"):  # last producer first
        red = sch.get_sblock(name)
        sch.compute_at(red, row)
        sch.set_scope(red, 0, "shared")  # every thread of the row reads the result
        (r,) = sch.get_loops(red)[-1:]
        r_vectors, r_lanes = sch.split(r, [None, vec])
        r_steps, r_tx = sch.split(r_vectors, [None, threads])
        sch.reorder(r_steps, r_lanes, r_tx)
        sch.bind(r_tx, "threadIdx.x")  # lowered to a cross-thread (warp shuffle) reduction
        sch.unroll(r_lanes)
    return sch.mod["main"]


softmax_kernel = tileauto.jit(out_idx=[-1], target="cuda")(softmax)


def configs(M: int, N: int) -> list[dict]:
    """16 candidates: threads per block (one row per block) and elements per thread step."""
    out = []
    for threads, vec in [
        (32, 4), (64, 4), (128, 4), (256, 4), (512, 4), (1024, 4),
        (64, 2), (128, 2), (256, 2), (512, 2), (1024, 2),
        (64, 1), (128, 1), (256, 1), (512, 1), (1024, 1),
    ]:  # fmt: skip
        out.append({"threads": threads, "vec": vec})
    return out


get_configs = configs


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def main(argv: list[str] | None = None) -> int:
    args = _cuda_common.cuda_args(
        argv, __doc__, "--shape", nargs=2, default=(8192, 4096), metavar=("M", "N")
    )
    M, N = args.shape
    candidates = configs(M, N)
    if not _cuda_common.compile_every_config(
        softmax, (M, N), candidates, f"softmax {M}x{N}", args.no_nvcc
    ):
        return 0
    torch.manual_seed(0)
    x = torch.randn(M, N, device="cuda") * 4
    gbytes = 2 * M * N * x.element_size() / 1e9
    return _cuda_common.gpu_check_and_time(
        softmax_kernel,
        (M, N),
        [x],
        reference,
        candidates,
        baseline="torch.softmax",
        tol=dict(rtol=1e-5, atol=1e-6),
        width=24,
        rate=lambda ms: f"{gbytes / ms * 1e3:7.1f} GB/s",
    )


if __name__ == "__main__":
    sys.exit(main())
