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

import argparse
import shutil
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

#: What every config must fit (any CUDA GPU since Kepler; the dynamic-shared-memory opt-in of
#: newer GPUs is not used).
GPU_LIMITS = {
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 48 * 1024,
    "max_local_memory_per_block": 2**31 - 1,
    "max_thread_x": 1024,
    "max_thread_y": 1024,
    "max_thread_z": 64,
    "max_vthread": 1,
    "max_vector_bytes": 16,
}
COMPILE_TARGET = {"kind": "cuda", "arch": "sm_90"}


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


def compile_cuda_source(func: tvm.tirx.PrimFunc, target=COMPILE_TARGET) -> str:
    """Compile for CUDA (no GPU needed) and return the generated CUDA C of the device kernels."""
    ex = tvm.compile(func, target=tvm.target.Target(target))
    device_mods = [m for m in ex.mod.imports if m.kind == "cuda"]
    if not device_mods:
        raise RuntimeError("the kernel has no CUDA device code: is it bound to threads?")
    return device_mods[0].inspect_source("cuda")


def lowered_gpu_ok(func: tvm.tirx.PrimFunc, limits: dict | None = None) -> bool:
    """``verify_gpu_code`` on the lowered function (it accepts anything before lowering)."""
    mod = tvm.IRModule({"main": func})
    passes = [
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.UnifyThreadBinding(),
        s_tir.transform.LowerMatchBuffer(),
        s_tir.transform.LowerOpaqueBlock(),
        tvm.tirx.transform.FlattenBuffer(),
    ]
    with tvm.target.Target(COMPILE_TARGET):
        mod = tvm.ir.transform.Sequential(passes)(mod)
    return bool(s_tir.analysis.verify_gpu_code(mod["main"], limits or GPU_LIMITS))


def ptx_of(source: str, arch: str = "sm_90") -> bytes | None:
    """PTX from nvcc for a CUDA source, or None when nvcc is not installed."""
    if shutil.which("nvcc") is None:
        return None
    from tvm.support import nvcc

    with tvm.target.Target({"kind": "cuda", "arch": arch}):
        return nvcc.compile_cuda(source, target_format="ptx", arch=arch, compiler="nvcc")


def _bench_cuda(fn, *args, warmup: int = 5, reps: int = 50) -> float:
    """Mean time per call in milliseconds, synchronized around a loop of calls."""
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="M = N = K (default 2048)")
    parser.add_argument("--no-nvcc", action="store_true", help="skip the nvcc PTX check")
    args = parser.parse_args(argv)
    M = N = K = args.size
    candidates = configs(M, N, K)
    print(f"gemm {M}x{N}x{K}: {len(candidates)} configs for {COMPILE_TARGET}")
    for cfg in [{}] + candidates:
        func = gemm(M, N, K, **cfg)
        t0 = time.perf_counter()
        source = compile_cuda_source(func)
        ms = (time.perf_counter() - t0) * 1e3
        if not lowered_gpu_ok(func):
            raise SystemExit(f"config {cfg} breaks the GPU limits {GPU_LIMITS}")
        ptx = None if args.no_nvcc else ptx_of(source)
        label = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        ptx_note = f", PTX {len(ptx)} B" if ptx is not None else ""
        print(f"  {label}: CUDA source {len(source)} chars ({ms:.0f} ms){ptx_note}")

    if not torch.cuda.is_available():
        print("no CUDA GPU present (torch.cuda.is_available() is False): compiled only")
        return 0
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(K, N, device="cuda")
    ref = a @ b
    t_torch = _bench_cuda(torch.matmul, a, b)
    flops = 2.0 * M * N * K
    print(f"{'torch.matmul':>60}: {t_torch:8.3f} ms {flops / t_torch / 1e9:7.1f} TFLOP/s")
    for cfg in [{}] + candidates:
        kern = matmul(M, N, K, **cfg)
        torch.testing.assert_close(kern(a, b), ref, rtol=1e-3, atol=1e-4 * K**0.5)
        ms = _bench_cuda(kern, a, b)
        label = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        print(f"{label:>60}: {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
