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


def softmax(M: int, N: int, threads: int = 256, vec: int = 4, dtype: str = "float32"):
    """Return the PrimFunc ``main(X, O)``: softmax over each row of X (M, N) on a CUDA device.

    Args:
        M, N: tensor shape (any positive ints).
        threads: threads per block (one block per row; a multiple of 32, at most 1024).
        vec: consecutive elements per thread and step (vector width; at most 16 bytes).
        dtype: element type.
    """
    if M < 1 or N < 1:
        raise ValueError(f"M and N must be positive, got M={M!r}, N={N!r}")
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
    parser.add_argument("--shape", type=int, nargs=2, default=(8192, 4096), metavar=("M", "N"))
    parser.add_argument("--no-nvcc", action="store_true", help="skip the nvcc PTX check")
    args = parser.parse_args(argv)
    M, N = args.shape
    candidates = configs(M, N)
    print(f"softmax {M}x{N}: {len(candidates)} configs for {COMPILE_TARGET}")
    for cfg in [{}] + candidates:
        func = softmax(M, N, **cfg)
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
    x = torch.randn(M, N, device="cuda") * 4
    ref = torch.softmax(x, dim=-1)
    gbytes = 2 * M * N * x.element_size() / 1e9
    t_torch = _bench_cuda(torch.softmax, x, -1)
    print(f"{'torch.softmax':>24}: {t_torch:8.3f} ms {gbytes / t_torch * 1e3:7.1f} GB/s")
    for cfg in [{}] + candidates:
        kern = softmax_kernel(M, N, **cfg)
        torch.testing.assert_close(kern(x), ref, rtol=1e-5, atol=1e-6)
        ms = _bench_cuda(kern, x)
        label = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        print(f"{label:>24}: {ms:8.3f} ms {gbytes / ms * 1e3:7.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
