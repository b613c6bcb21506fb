"""Compiling many configs before calling them: one by one, through ``par_compile``, and again.

    python bench/par_compile.py [--size 512] [--rounds 3] [--workers N]

The configs of the example CPU GEMM (``examples/gemm_cpu.py``, 16 configs and the default),
each round in a fresh cache folder, the three ways a script gets them, interleaved so that a
busy machine weighs on all three alike:

- one by one: ``matmul(M, N, K, **cfg)`` for each config (each call compiles in this process);
- ``par_compile``: ``matmul.par_compile(configs)`` with ``--workers`` compile workers (the
  settings' default: the share of the cores tuning uses), then the same calls, which must
  compile nothing;
- again, in a fresh ``JITImpl`` of the same factory (another process's view of the cache):
  ``par_compile`` finds every config in the disk cache and loads it.

Prints the median wall time of each over the rounds and the ratios side by side. The
speed-up of ``par_compile`` is bounded by the cores: about the worker count on an idle
machine, less where other work shares them. No target: the figures say what to expect.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


def _round(size: int, workers: int | None) -> dict[str, float]:
    import gemm_cpu

    import tileauto

    sizes = (size, size, size)
    configs = [{}] + gemm_cpu.configs(*sizes)
    names = list(inspect.signature(gemm_cpu.gemm).parameters)
    calls = [{**dict(zip(names, sizes)), **cfg} for cfg in configs]
    times: dict[str, float] = {}
    for way in ("one by one", "par_compile", "again"):
        with tempfile.TemporaryDirectory(prefix="tileauto-bench-par-") as cache:
            os.environ["TILEAUTO_CACHE_DIR"] = cache
            impl = tileauto.jit(out_idx=[-1], target="llvm")(gemm_cpu.gemm)
            if way == "again":  # the cache a par_compile filled, read by a fresh JITImpl
                impl.par_compile(calls, workers)
                impl = tileauto.jit(out_idx=[-1], target="llvm")(gemm_cpu.gemm)
            start = time.perf_counter()
            if way != "one by one":
                failed = [str(k) for k in impl.par_compile(calls, workers) if not k]
                if failed:
                    raise SystemExit(f"par_compile failed: {failed[0]}")
            kernels = [impl(*sizes, **cfg) for cfg in configs]
            times[way] = time.perf_counter() - start
            expected = (
                0 if way == "again" else len({tuple(sorted(k.config.items())) for k in kernels})
            )
            if impl.compile_count != expected:
                raise SystemExit(f"{way}: {impl.compile_count} compiles, expected {expected}")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="compile workers")
    parser.add_argument("--quick", action="store_true", help="one round at size 128")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.rounds = 128, 1
    if args.rounds < 1 or args.size < 16:
        parser.error(f"--rounds must be >= 1 and --size >= 16, got {args.rounds}, {args.size}")
    cores = len(os.sched_getaffinity(0))
    if args.workers is not None and not 1 <= args.workers <= cores:
        parser.error(f"--workers must be in [1, {cores}] (the cores this process may use)")
    rounds = [_round(args.size, args.workers) for _ in range(args.rounds)]
    median = {way: statistics.median(r[way] for r in rounds) for way in rounds[0]}
    print(f"17 GEMM configs at {args.size}^3, {cores} cores, load {os.getloadavg()[0]:.1f}")
    base = median["one by one"]
    for way, seconds in median.items():
        print(f"  {way:>11}: {seconds:7.2f} s   {base / seconds:6.1f}x the one-by-one compile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
