"""Record new tuning spaces on this machine's CPU (or GPU), as a user would, for held-out figures.

    TILEAUTO_NUM_THREADS=1 python bench/record_cpu_spaces.py [--out bench/spaces]
        [--cache-dir DIR] [--shapes 384x384x384,256x1024x512,1024x256x256,64x4096x512]
        [--warmup 10] [--rep 50] [--kernel cpu|cuda]

For each ``MxNxK`` shape it tunes ``examples/gemm_cpu.py``'s GEMM exhaustively over
``gemm_cpu.space(M, N, K)`` (every valid config compiled, checked against ``torch.matmul`` and
timed: ``search="exhaustive"``), each shape in a cache folder of its own under ``--cache-dir``
(kept: a killed run resumes where it stopped, every measurement is in the cache as it is
made). Then it runs ``tileauto cache prior gemm DIR``, the command a user runs to turn what one
machine has tuned into a prior for another, and copies each shape's trial file (gzipped) to
``--out/tileauto_gemmcpu_<M>x<N>x<K>.json.gz``. ``bench/search_quality.py --holdout
bench/spaces`` replays them (the kernel is ``tileauto_gemmcpu``, the "device" the shape).

Why: every recorded space in ``../shared/data/tuning-spaces`` was seen while the guided
search's defaults were designed (issue 36), so none of them gives a clean held-out figure.
These spaces were recorded after the strategy was frozen (docs/search.md, "Spaces recorded
after the design"). One thread per kernel (``TILEAUTO_NUM_THREADS=1``): timings with both
cores of a shared machine are bimodal (docs/search.md, "On a real kernel: the CPU GEMM").

``--kernel cuda`` records ``examples/gemm_cuda.py``'s GEMM over ``gemm_cuda.space(M, N, K)``
on the CUDA GPU instead (files ``tileauto_gemmcuda_<M>x<N>x<K>.json.gz``); without a GPU it
says so and exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

SHAPES = "384x384x384,256x1024x512,1024x256x256,64x4096x512"


def shape_of(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is MxNxK (three ints), got {text!r}") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"a shape's sizes must be >= 1, got {text!r}")
    return m, n, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "spaces")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path.home() / ".cache" / "tileauto-spaces"
    )
    parser.add_argument("--shapes", default=SHAPES, help=f"MxNxK,... (default {SHAPES})")
    parser.add_argument("--warmup", type=float, default=10.0, help="ms of warm-up per config")
    parser.add_argument("--rep", type=float, default=50.0, help="ms of timing per config")
    parser.add_argument(
        "--kernel", choices=["cpu", "cuda"], default="cpu",
        help="examples/gemm_cpu.py on the CPU (default) or examples/gemm_cuda.py on the GPU",
    )  # fmt: skip
    args = parser.parse_args(argv)
    shapes = [shape_of(s) for s in args.shapes.split(",")]
    import torch

    import tileauto

    if args.kernel == "cuda":
        import gemm_cuda as module

        if not torch.cuda.is_available():
            print(
                "--kernel cuda: no CUDA GPU here (torch.cuda.is_available() is False)",
                file=sys.stderr,
            )
            return 1
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference in full fp32, as the kernel
    else:
        import gemm_cpu as module

        if os.environ.get("TILEAUTO_NUM_THREADS") != "1":
            print("note: TILEAUTO_NUM_THREADS is not 1: kernels time on every core", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    for m, n, k in shapes:
        shape = f"{m}x{n}x{k}"
        cache = args.cache_dir / shape  # one tuned entry per folder: its export is this shape's
        os.environ["TILEAUTO_CACHE_DIR"] = str(cache)  # read at each tuning
        space = module.space(m, n, k)
        start = time.perf_counter()
        tuned = tileauto.autotune(
            configs=space, search="exhaustive", warmup=args.warmup, rep=args.rep,
            ref_prog=torch.matmul, rtol=1e-3, atol=1e-4 * k**0.5, verbose=False,
        )(module.matmul)  # fmt: skip
        tuned(m, n, k)
        result = tuned.get_tuner_result(m, n, k)
        ok = sum(t.ok for t in result.trials)
        print(f"{shape}: {len(space):,} configs, {ok:,} passed, best {result.latency:.4f} ms "
              f"{result.config}; {time.perf_counter() - start:.0f} s (0 s: a cache hit)",
              flush=True)  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "tileauto", "cache", "prior", "gemm", tmp,
                 "--cache-dir", str(cache)],
                check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            (export,) = Path(tmp).glob("*.json*")
            dest = args.out / f"tileauto_gemm{args.kernel}_{shape}.json.gz"
            shutil.copyfile(export, dest)
        print(f"wrote {dest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
