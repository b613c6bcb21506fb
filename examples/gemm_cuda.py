"""Tiled fp32 GEMM for CUDA GPUs: ``C = A @ B`` with A (M, K) and B (K, N), both row-major.

The classic shared-memory kernel, built with TE and scheduled with ``tvm.s_tir.Schedule``:

* each thread block computes a ``block_M x block_N`` tile of C (``blockIdx.y``, ``blockIdx.x``)
  with ``(block_M / thread_M) x (block_N / thread_N)`` threads (``threadIdx.y``, ``threadIdx.x``);
* each thread accumulates a ``thread_M x thread_N`` sub-tile in registers (``cache_write``
  "local");
* for every ``block_K`` slice of the reduction, the block stages a tile of A and of B in shared
  memory (``cache_read`` "shared" + ``compute_at``); the copy is a cooperative fetch: the tile
  loops are fused and split over all threads of the block, ``vec`` elements (a float4 for
  ``vec = 4``) per thread and step;
* inside a slice, each thread loads a column of its A rows and a row of its B columns from
  shared memory into registers, ``unroll`` k-steps unrolled.

M, N and K must be multiples of the block tiles (``ValueError`` otherwise; pad the inputs for
other sizes). Without a GPU, ``python examples/gemm_cuda.py`` compiles every config of
``configs()`` for ``sm_90``, checks the PTX with nvcc when it is installed and prints the size of
the CUDA source; with one, it also runs them and checks against ``torch.matmul``.
"""

from __future__ import annotations

import sys

import _cuda_common
import torch
import tvm

# "X as X": re-exported, for callers and the tests (e.g. gemm_cuda.ptx_of)
from _cuda_common import COMPILE_TARGET as COMPILE_TARGET
from _cuda_common import GPU_LIMITS
from _cuda_common import compile_cuda_source as compile_cuda_source
from _cuda_common import lowered_gpu_ok as lowered_gpu_ok
from _cuda_common import ptx_of as ptx_of
from tvm import s_tir, te

import tileauto


def check_config(
    M: int,
    N: int,
    K: int,
    block_M: int,
    block_N: int,
    block_K: int,
    thread_M: int,
    thread_N: int,
    vec: int,
    unroll: int,
    dtype: str = "float32",
) -> None:
    """Raise ``ValueError`` naming the first constraint a config breaks."""
    itemsize = tvm.runtime.DataType(dtype).bits // 8
    threads_y, threads_x = block_M // max(thread_M, 1), block_N // max(thread_N, 1)
    threads = threads_y * threads_x
    checks = [
        (M % block_M == 0 and N % block_N == 0 and K % block_K == 0,
         f"M={M}, N={N}, K={K} must be multiples of block_M={block_M}, block_N={block_N}, "
         f"block_K={block_K}"),
        (block_M % thread_M == 0 and block_N % thread_N == 0,
         f"block_M={block_M} / block_N={block_N} must be multiples of thread_M={thread_M} / "
         f"thread_N={thread_N}"),
        (block_K % unroll == 0, f"block_K={block_K} must be a multiple of unroll={unroll}"),
        (threads <= GPU_LIMITS["max_threads_per_block"],
         f"{threads} threads per block: more than {GPU_LIMITS['max_threads_per_block']}"),
        ((block_M + block_N) * block_K * itemsize <= GPU_LIMITS["max_shared_memory_per_block"],
         f"shared tiles of {(block_M + block_N) * block_K * itemsize} bytes exceed "
         f"{GPU_LIMITS['max_shared_memory_per_block']}"),
        (vec * itemsize <= GPU_LIMITS["max_vector_bytes"],
         f"vec={vec} {dtype} is wider than {GPU_LIMITS['max_vector_bytes']} bytes"),
        (block_K % vec == 0 and block_N % vec == 0,
         f"vec={vec} must divide block_K={block_K} and block_N={block_N} (vector loads)"),
        ((block_M * block_K) % (threads * vec) == 0 and (block_K * block_N) % (threads * vec) == 0,
         f"the A and B tiles must split evenly over {threads} threads x vec={vec}"),
    ]  # fmt: skip
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def gemm(
    M: int,
    N: int,
    K: int,
    block_M: int = 128,
    block_N: int = 128,
    block_K: int = 16,
    thread_M: int = 8,
    thread_N: int = 8,
    vec: int = 4,
    unroll: int = 4,
    dtype: str = "float32",
) -> tvm.tirx.PrimFunc:
    """Return the PrimFunc ``main(A, B, C)`` computing ``C = A @ B`` on a CUDA device.

    Args:
        M, N, K: problem sizes (multiples of block_M, block_N, block_K).
        block_M, block_N: output tile of one thread block.
        block_K: reduction slice staged in shared memory.
        thread_M, thread_N: register tile of one thread.
        vec: elements per thread per step of the cooperative shared-memory fetch.
        unroll: k-steps unrolled inside a slice.
        dtype: element type of A, B and C.
    """
    check_config(M, N, K, block_M, block_N, block_K, thread_M, thread_N, vec, unroll, dtype)
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    threads_y, threads_x = block_M // thread_M, block_N // thread_N
    by, ty, yi = sch.split(i, [None, threads_y, thread_M])
    bx, tx, xi = sch.split(j, [None, threads_x, thread_N])
    ko, ki, ku = sch.split(kk, [None, block_K // unroll, unroll])
    sch.reorder(by, bx, ty, tx, ko, ki, ku, yi, xi)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.unroll(ku)
    sch.unroll(yi)
    sch.unroll(xi)
    # Accumulators in registers, written back once per thread.
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, tx)
    # Shared-memory tiles of A and B per k slice, fetched by all threads together.
    for operand in (0, 1):
        tile = sch.cache_read(blk, operand, "shared")
        sch.compute_at(tile, ko)
        fused = sch.fuse(*sch.get_loops(tile)[-2:])
        _, f_ty, f_tx, lanes = sch.split(fused, [None, threads_y, threads_x, vec])
        sch.bind(f_ty, "threadIdx.y")
        sch.bind(f_tx, "threadIdx.x")
        sch.vectorize(lanes)
    # Register fragments: thread_M values of A and thread_N values of B per k step.
    for operand in (0, 1):
        frag = sch.cache_read(blk, operand, "local")
        sch.compute_at(frag, ku)
        sch.unroll(sch.get_loops(frag)[-1])
    sch.decompose_reduction(blk, ko)
    return sch.mod["main"]


matmul = tileauto.jit(out_idx=[-1], target="cuda")(gemm)


def configs(M: int, N: int, K: int) -> list[dict]:
    """Candidate tilings (about 16) that satisfy :func:`check_config` for these sizes."""
    out = []
    for bm, bn, bk, tm, tn, vec, unroll in [
        (128, 128, 16, 8, 8, 4, 4),
        (128, 128, 8, 8, 8, 4, 4),
        (128, 128, 32, 8, 8, 4, 4),
        (128, 64, 16, 8, 4, 4, 4),
        (64, 128, 16, 4, 8, 4, 4),
        (64, 64, 16, 4, 4, 4, 4),
        (64, 64, 32, 4, 4, 4, 8),
        (64, 64, 16, 8, 8, 4, 4),
        (128, 256, 16, 8, 16, 4, 4),
        (256, 128, 16, 16, 8, 4, 4),
        (128, 128, 16, 4, 8, 4, 2),
        (32, 32, 32, 2, 2, 4, 4),
        (64, 64, 8, 4, 4, 2, 8),
        (128, 64, 32, 4, 4, 4, 4),
        (32, 64, 16, 2, 4, 2, 2),
        (16, 16, 16, 1, 1, 1, 1),
    ]:
        try:
            check_config(M, N, K, bm, bn, bk, tm, tn, vec, unroll)
        except ValueError:
            continue
        out.append(
            {"block_M": bm, "block_N": bn, "block_K": bk, "thread_M": tm, "thread_N": tn,
             "vec": vec, "unroll": unroll}
        )  # fmt: skip
    return out


get_configs = configs


def space(M: int, N: int, K: int, dtype: str = "float32"):
    """A large constrained space for the search strategies: 970 configs where the tiles divide.

    The product of block tiles (``block_M``, ``block_N`` in 32-256, ``block_K`` in 8-32),
    register tiles (``thread_M``, ``thread_N`` in 4-16), vector width (2 or 4) and ``unroll``
    (1 or 4), kept where :func:`check_config` accepts the config and:

    * a block has 64 to 1024 threads (two warps at least);
    * a thread holds at most 128 accumulators (more spill out of the 255 registers).

    ``bench/record_cpu_spaces.py --kernel cuda`` tunes it exhaustively on a GPU.
    """
    from tileauto.space import product

    itemsize = tvm.runtime.DataType(dtype).bits // 8
    threads = "(block_M // thread_M) * (block_N // thread_N)"
    tiles = [32, 64, 128, 256]
    return product(
        block_M=tiles,
        block_N=tiles,
        block_K=[8, 16, 32],
        thread_M=[4, 8, 16],
        thread_N=[4, 8, 16],
        vec=[2, 4],
        unroll=[1, 4],
        constraints=[
            f"{M} % block_M == 0 and {N} % block_N == 0 and {K} % block_K == 0",
            "block_M % thread_M == 0 and block_N % thread_N == 0",
            "block_K % unroll == 0",
            f"64 <= {threads} <= {GPU_LIMITS['max_threads_per_block']}",
            f"(block_M + block_N) * block_K * {itemsize} "
            f"<= {GPU_LIMITS['max_shared_memory_per_block']}",
            f"vec * {itemsize} <= {GPU_LIMITS['max_vector_bytes']}",
            "block_K % vec == 0 and block_N % vec == 0",
            f"(block_M * block_K) % ({threads} * vec) == 0",
            f"(block_K * block_N) % ({threads} * vec) == 0",
            "thread_M * thread_N <= 128",
        ],
    )


def main(argv: list[str] | None = None) -> int:
    args = _cuda_common.cuda_args(
        argv, __doc__, "--size", default=2048, help="M = N = K (default 2048)"
    )
    M = N = K = args.size
    if M <= 0 or M % 128:  # the default config's tiles (block_M = block_N = 128)
        print(f"gemm_cuda: --size must be a positive multiple of 128, got {M}", file=sys.stderr)
        return 2
    candidates = configs(M, N, K)
    title = f"gemm {M}x{N}x{K}"
    if not _cuda_common.compile_every_config(
        gemm, (M, N, K), candidates, title, args.no_nvcc, timed=True
    ):
        return 0
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(K, N, device="cuda")
    flops = 2.0 * M * N * K
    return _cuda_common.gpu_check_and_time(
        matmul,
        (M, N, K),
        [a, b],
        torch.matmul,
        candidates,
        baseline="torch.matmul",
        tol=dict(rtol=1e-3, atol=1e-4 * K**0.5),
        width=60,
        rate=lambda ms: f"{flops / ms / 1e9:7.1f} TFLOP/s",
    )


if __name__ == "__main__":
    sys.exit(main())
