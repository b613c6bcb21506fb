"""Tune the CUDA GEMM on a GPU: ``@tileauto.autotune`` over ``@tileauto.jit(target="cuda")``.

    python examples/tune_gemm_cuda.py [--size 4096] [--rep 50]  (milliseconds per config)

The GPU counterpart of ``demo_tune_gemm.py``: the configs of ``examples/gemm_cuda.py`` compile
in parallel in worker processes (nvcc or NVRTC), each is checked against ``torch.matmul`` in the
run worker on the GPU, then timed there. Prints the table of every config, the tuned kernel's
throughput against ``torch.matmul`` (cuBLAS, TF32 off), and the time of a second call. A second
run of this script loads the winner from the disk cache. Without a CUDA GPU it says so and
exits 0 (``gemm_cuda.py`` shows the compile half without a GPU).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cuda_common  # noqa: E402
import gemm_cuda  # noqa: E402  (the example next to this file)

import tileauto  # noqa: E402


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.matmul(A, B)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="M = N = K (default 4096)")
    parser.add_argument("--warmup", type=float, default=25, help="ms of warm-up per config")
    parser.add_argument("--rep", type=float, default=100, help="ms of timing per config")
    args = parser.parse_args(argv)
    n = args.size
    if not torch.cuda.is_available():
        print("no CUDA GPU present (torch.cuda.is_available() is False): nothing to tune")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False  # the kernels compute in full fp32

    tol = dict(rtol=1e-3, atol=1e-4 * n**0.5)
    tuned = tileauto.autotune(
        configs=gemm_cuda.configs, warmup=args.warmup, rep=args.rep, ref_prog=reference, **tol
    )(tileauto.jit(out_idx=[-1], target="cuda")(gemm_cuda.gemm))

    start = time.perf_counter()
    kernel = tuned(n, n, n)
    tuning_s = time.perf_counter() - start
    result = tuned.get_tuner_result(n, n, n)
    source = "loaded from the disk cache" if result.cache_hit else "tuned"
    print(f"\n{source} in {tuning_s:.1f} s on {torch.cuda.get_device_name()}")
    print(result.table())

    start = time.perf_counter()
    assert tuned(n, n, n) is kernel
    print(f"second call in this process: {1e3 * (time.perf_counter() - start):.3f} ms (no tuning)")

    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    torch.testing.assert_close(kernel(a, b), torch.matmul(a, b), **tol)
    t_ref = _cuda_common.bench_cuda_ms(torch.matmul, a, b)
    t_ours = _cuda_common.bench_cuda_ms(kernel, a, b)
    tflops = 2.0 * n**3 / 1e9
    speedup = f"{result.speedup:.2f}x" if result.speedup else "n/a"
    print(
        f"tuned GEMM {n}^3: {result.latency:.3f} ms (tuner's median), best config "
        f"{result.config}; speedup over the default config {speedup}\n"
        f"  same process, mean of 50 calls: tuned {t_ours:.3f} ms ({tflops / t_ours:.1f} "
        f"TFLOP/s), torch.matmul {t_ref:.3f} ms ({tflops / t_ref:.1f} TFLOP/s), "
        f"ratio {t_ours / t_ref:.2f}x"
    )
    print("the tuned kernel matches torch.matmul")
    return 0


if __name__ == "__main__":
    sys.exit(main())
