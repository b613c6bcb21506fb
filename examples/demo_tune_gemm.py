"""The README demo: tune the example GEMM on the CPU, print every config, check and compare.

    python examples/demo_tune_gemm.py [--size 512] [--rep 50]  (milliseconds per config)

Tunes ``examples/gemm_cpu.py`` over its 16 configs with ``@tileauto.autotune`` over
``@tileauto.jit``: configs compile in parallel in worker processes, each is checked against
``torch.matmul`` in an isolated run worker, then timed. The table lists every config with its
median latency, spread and speedup over the default config. A second call in the same process
returns the tuned kernel at once, and a second run of this script loads it from the disk cache
(``TILEAUTO_CACHE_DIR``, default ``~/.tileauto/cache``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemm_cpu  # noqa: E402  (the example next to this file)

import tileauto  # noqa: E402


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.matmul(A, B)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512, help="M = N = K (default 512)")
    parser.add_argument("--warmup", type=float, default=10, help="ms of warm-up per config")
    parser.add_argument("--rep", type=float, default=50, help="ms of timing per config")
    args = parser.parse_args(argv)
    n = args.size

    tuned = tileauto.autotune(
        configs=gemm_cpu.configs,
        warmup=args.warmup,
        rep=args.rep,
        ref_prog=reference,
        rtol=1e-3,
        atol=1e-4 * n**0.5,
    )(gemm_cpu.matmul)

    start = time.perf_counter()
    kernel = tuned(n, n, n)
    tuning_s = time.perf_counter() - start
    result = tuned.get_tuner_result(n, n, n)
    source = "loaded from the disk cache" if result.cache_hit else "tuned"
    print(f"\n{source} in {tuning_s:.1f} s; best config: {result.config}")
    if result.cache_hit:
        print(result.table())

    start = time.perf_counter()
    assert tuned(n, n, n) is kernel
    print(f"second call in this process: {1e3 * (time.perf_counter() - start):.3f} ms (no tuning)")

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.testing.assert_close(kernel(a, b), torch.matmul(a, b), rtol=1e-3, atol=1e-4 * n**0.5)
    speedup = f"{result.speedup:.2f}x" if result.speedup else "n/a"
    print(
        f"tuned GEMM {n}^3: {result.latency:.3f} ms (median), {2 * n**3 / result.latency / 1e6:.1f} GFLOP/s; "
        f"default config {result.default_latency or float('nan'):.3f} ms; speedup over default {speedup}"
    )
    print("the tuned kernel matches torch.matmul")
    return 0


if __name__ == "__main__":
    sys.exit(main())
