"""Code the CUDA examples share: GPU limits, compiling without a GPU, and ``main()`` pieces.

Not an example itself; imported by name like ``_common.py`` (see there). Every CUDA example
re-exports ``GPU_LIMITS``, ``COMPILE_TARGET``, ``compile_cuda_source``, ``lowered_gpu_ok`` and
``ptx_of`` from here.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable, Sequence

import torch
import tvm
from _common import config_label, time_configs
from tvm import s_tir

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


def bench_cuda_ms(fn, *args, warmup: int = 5, reps: int = 50) -> float:
    """Mean time per call in milliseconds, synchronized around a loop of calls."""
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def cuda_args(argv: list[str] | None, doc: str, flag: str, **size_option) -> argparse.Namespace:
    """Parse the size option ``flag`` (``size_option`` goes to ``add_argument``) and --no-nvcc."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(flag, type=int, **size_option)
    parser.add_argument("--no-nvcc", action="store_true", help="skip the nvcc PTX check")
    return parser.parse_args(argv)


def compile_every_config(
    factory: Callable,
    sizes: Sequence[int],
    candidates: list[dict],
    title: str,
    no_nvcc: bool,
    *,
    timed: bool = False,
) -> bool:
    """Compile the default config and ``candidates`` for sm_90 and print the source sizes.

    ``timed`` adds the compile time of each. Exits when a config breaks :data:`GPU_LIMITS`.
    Returns whether a CUDA GPU is present to run them on (saying so when there is none).
    """
    print(f"{title}: {len(candidates)} configs for {COMPILE_TARGET}")
    for cfg in [{}] + candidates:
        func = factory(*sizes, **cfg)
        t0 = time.perf_counter()
        source = compile_cuda_source(func)
        ms = (time.perf_counter() - t0) * 1e3
        if not lowered_gpu_ok(func):
            raise SystemExit(f"config {cfg} breaks the GPU limits {GPU_LIMITS}")
        ptx = None if no_nvcc else ptx_of(source)
        ms_note = f" ({ms:.0f} ms)" if timed else ""
        ptx_note = f", PTX {len(ptx)} B" if ptx is not None else ""
        print(f"  {config_label(cfg)}: CUDA source {len(source)} chars{ms_note}{ptx_note}")

    if not torch.cuda.is_available():
        print("no CUDA GPU present (torch.cuda.is_available() is False): compiled only")
        return False
    return True


def gpu_check_and_time(
    kernel: Callable,
    sizes: Sequence[int],
    inputs: list,
    reference: Callable,
    candidates: list[dict],
    *,
    baseline: str,
    **table,
) -> int:
    """Time ``reference`` on the GPU, then check and time the default config and ``candidates``.

    ``table`` (tol, width, rate) goes to :func:`_common.time_configs`.
    """
    ref = reference(*inputs)
    t_ref = bench_cuda_ms(reference, *inputs)
    cfgs = [{}] + candidates
    time_configs(kernel, sizes, cfgs, inputs, ref, (baseline, t_ref), bench=bench_cuda_ms, **table)
    return 0
