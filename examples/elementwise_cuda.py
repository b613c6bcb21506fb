"""Fused elementwise kernel for CUDA GPUs: the SwiGLU gate ``out = silu(gate) * up``.

``silu(g) = g / (1 + exp(-g))`` over (M, N) tensors, one pass reading two tensors and writing
one. Built with TE and scheduled with ``tvm.s_tir.Schedule``: the index space is fused into a
flat loop and split into thread blocks of ``threads`` threads; each thread handles ``unroll``
vectors of ``vec`` consecutive elements (a float4 for ``vec = 4``), with the threads of a block
on consecutive vectors so that every step is a coalesced access. Any M and N work: the
partial last block is predicated per vector, and when ``vec`` does not divide ``M * N`` the
lanes are predicated too (and the access is no longer vectorized).

Without a GPU, ``python examples/elementwise_cuda.py`` compiles every config of ``configs()``
for ``sm_90``, checks the PTX with nvcc when it is installed and prints the size of the CUDA
source; with one, it also runs them and checks against torch.
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


def silu_mul(
    M: int,
    N: int,
    threads: int = 256,
    vec: int = 4,
    unroll: int = 2,
    dtype: str = "float32",
) -> tvm.tirx.PrimFunc:
    """Return the PrimFunc ``main(G, U, O)`` computing ``O = silu(G) * U`` on a CUDA device.

    Args:
        M, N: tensor shape (any positive ints).
        threads: threads per block (at most 1024).
        vec: consecutive elements per thread and step (vector width; at most 16 bytes).
        unroll: steps per thread (a block covers ``threads * vec * unroll`` elements).
        dtype: element type.
    """
    if M < 1 or N < 1:
        raise ValueError(f"M and N must be positive, got M={M!r}, N={N!r}")
    itemsize = tvm.runtime.DataType(dtype).bits // 8
    if not 1 <= threads <= GPU_LIMITS["max_threads_per_block"]:
        raise ValueError(f"threads={threads} must be in [1, {GPU_LIMITS['max_threads_per_block']}]")
    if vec < 1 or vec * itemsize > GPU_LIMITS["max_vector_bytes"] or unroll < 1:
        raise ValueError(f"vec={vec} must be 1..{GPU_LIMITS['max_vector_bytes'] // itemsize}, "
                         f"unroll={unroll} positive")  # fmt: skip
    G = te.placeholder((M, N), dtype, name="G")
    U = te.placeholder((M, N), dtype, name="U")
    one = tvm.tirx.const(1, dtype)
    Out = te.compute((M, N), lambda i, j: G[i, j] * U[i, j] / (one + te.exp(-G[i, j])), name="O")

    sch = s_tir.Schedule(te.create_prim_func([G, U, Out]))
    out = sch.get_sblock("O")
    flat = sch.fuse(*sch.get_loops(out))
    n = M * N
    # Split off the lanes first: when vec divides n, the bounds predicate of the last block
    # does not depend on the lane, so the lanes still become one vector access.
    vectors, lanes = sch.split(flat, [None, vec])
    bx, step, tx = sch.split(vectors, [None, unroll, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.unroll(step)
    if n % vec == 0:
        sch.vectorize(lanes)
    else:
        sch.unroll(lanes)
    return sch.mod["main"]


swiglu = tileauto.jit(out_idx=[-1], target="cuda")(silu_mul)


def configs(M: int, N: int) -> list[dict]:
    """16 candidates: threads per block, vector width and steps per thread."""
    out = []
    for threads in (128, 256, 512, 1024):
        for vec, unroll in ((4, 1), (4, 2), (2, 4), (1, 4)):
            out.append({"threads": threads, "vec": vec, "unroll": unroll})
    return out


get_configs = configs


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


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
    parser.add_argument("--shape", type=int, nargs=2, default=(8192, 8192), metavar=("M", "N"))
    parser.add_argument("--no-nvcc", action="store_true", help="skip the nvcc PTX check")
    args = parser.parse_args(argv)
    M, N = args.shape
    candidates = configs(M, N)
    print(f"silu(gate) * up, {M}x{N}: {len(candidates)} configs for {COMPILE_TARGET}")
    for cfg in [{}] + candidates:
        func = silu_mul(M, N, **cfg)
        source = compile_cuda_source(func)
        if not lowered_gpu_ok(func):
            raise SystemExit(f"config {cfg} breaks the GPU limits {GPU_LIMITS}")
        ptx = None if args.no_nvcc else ptx_of(source)
        label = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        ptx_note = f", PTX {len(ptx)} B" if ptx is not None else ""
        print(f"  {label}: CUDA source {len(source)} chars{ptx_note}")

    if not torch.cuda.is_available():
        print("no CUDA GPU present (torch.cuda.is_available() is False): compiled only")
        return 0
    torch.manual_seed(0)
    gate = torch.randn(M, N, device="cuda") * 4
    up = torch.randn(M, N, device="cuda")
    ref = reference(gate, up)
    gbytes = 3 * M * N * gate.element_size() / 1e9
    t_torch = _bench_cuda(reference, gate, up)
    print(f"{'torch silu(g) * u':>36}: {t_torch:8.3f} ms {gbytes / t_torch * 1e3:7.1f} GB/s")
    for cfg in [{}] + candidates:
        kern = swiglu(M, N, **cfg)
        torch.testing.assert_close(kern(gate, up), ref, rtol=1e-5, atol=1e-5)
        ms = _bench_cuda(kern, gate, up)
        label = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        print(f"{label:>36}: {ms:8.3f} ms {gbytes / ms * 1e3:7.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
