"""Record new tuning spaces on this machine's CPU (or GPU), as a user would, for held-out figures.

    TILEAUTO_NUM_THREADS=1 python bench/record_cpu_spaces.py [--out bench/spaces]
        [--cache-dir DIR] [--shapes 384x384x384,256x1024x512,1024x256x256,64x4096x512]
        [--warmup 10] [--rep 50] [--kernel cpu|cuda] [--mcpu haswell]

For each ``MxNxK`` shape it tunes ``examples/gemm_cpu.py``'s GEMM exhaustively over
``gemm_cpu.space(M, N, K)`` (every valid config compiled, checked against ``torch.matmul`` and
timed: ``search="exhaustive"``), each shape (and ``--mcpu``) in a cache folder of its own
under ``--cache-dir`` (kept: a killed run resumes where it stopped, every measurement is in the
cache as it is made). Then it runs ``tileauto cache prior gemm DIR``, the command a user runs
to turn what one machine has tuned into a prior for another, and copies each shape's trial
file (gzipped) to ``--out/tileauto_gemmcpu_<M>x<N>x<K>.json.gz``. ``bench/search_quality.py
--holdout bench/spaces`` replays them (the kernel is ``tileauto_gemmcpu``, the "device" the
shape).

Why: every recorded space in ``../shared/data/tuning-spaces`` was seen while the guided
search's defaults were designed (issue 36), so none of them gives a clean held-out figure.
These spaces were recorded after the strategy was frozen (docs/search.md, "Spaces recorded
after the design"). One thread per kernel (``TILEAUTO_NUM_THREADS=1``): timings with both
cores of a shared machine are bimodal (docs/search.md, "On a real kernel: the CPU GEMM").

``--mcpu NAME`` compiles the CPU GEMM for another CPU than this host (an LLVM CPU name, e.g.
``haswell``: AVX2 and 16 vector registers, no AVX-512) and fits the space to that CPU's
register file (``gemm_cpu.space(..., avx512=...)``): the same kernel on an unlike device, run
on this host, which must have every vector feature that CPU has. Its files keep the same names,
so write them to a folder of their own (``--out bench/spaces/avx2``).

``--kernel cuda`` records ``examples/gemm_cuda.py``'s GEMM over ``gemm_cuda.space(M, N, K)``
on the CUDA GPU instead (files ``tileauto_gemmcuda_<M>x<N>x<K>.json.gz``); without a GPU it
says so and exits 1.
"""

from __future__ import annotations

import argparse
import functools
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


def cpu_target(mcpu: str) -> tuple[dict[str, str], bool]:
    """The LLVM target for CPU ``mcpu``, and whether it has AVX-512; ValueError where LLVM does
    not know the name or this host lacks a vector feature that CPU has (its code would fault)."""
    import tvm
    from tvm.target import codegen

    triple = codegen.llvm_get_system_triple()
    if not codegen.llvm_is_valid_cpu(mcpu, triple):
        raise ValueError(f"--mcpu: LLVM does not know a CPU {mcpu!r} for {triple}")
    target = {"kind": "llvm", "mcpu": mcpu}
    there, host = tvm.target.Target(target), tvm.target.Target.from_device("cpu")
    features = ("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl")
    lacks = [f for f in features
             if codegen.llvm_cpu_has_features([f], there)
             and not codegen.llvm_cpu_has_features([f], host)]  # fmt: skip
    if lacks:
        raise ValueError(f"--mcpu {mcpu}: this host ({host.mcpu}) lacks {', '.join(lacks)}")
    return target, bool(codegen.llvm_cpu_has_features(["avx512f"], there))


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
    parser.add_argument(
        "--mcpu", default=None, metavar="NAME",
        help="--kernel cpu: compile for this LLVM CPU (e.g. haswell) instead of this host's",
    )  # fmt: skip
    args = parser.parse_args(argv)
    shapes = [shape_of(s) for s in args.shapes.split(",")]
    if args.mcpu is not None and args.kernel != "cpu":
        parser.error(f"--mcpu is for --kernel cpu, got --kernel {args.kernel}")
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
        factory, space_of = module.matmul, module.space
    else:
        import gemm_cpu as module

        factory, space_of = module.matmul, module.space
        if args.mcpu is not None:
            try:
                target, avx512 = cpu_target(args.mcpu)
            except ValueError as e:
                parser.error(str(e))
            factory = tileauto.jit(out_idx=[-1], target=target)(module.gemm)
            space_of = functools.partial(module.space, avx512=avx512)
            print(f"compiling for {target} (AVX-512: {avx512})", flush=True)
        if os.environ.get("TILEAUTO_NUM_THREADS") != "1":
            print("note: TILEAUTO_NUM_THREADS is not 1: kernels time on every core", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    for m, n, k in shapes:
        shape = f"{m}x{n}x{k}"
        # one tuned entry per folder, so that its export is this shape's on this target
        cache = args.cache_dir / (shape if args.mcpu is None else f"{shape}-{args.mcpu}")
        os.environ["TILEAUTO_CACHE_DIR"] = str(cache)  # read at each tuning
        space = space_of(m, n, k)
        start = time.perf_counter()
        tuned = tileauto.autotune(
            configs=space, search="exhaustive", warmup=args.warmup, rep=args.rep,
            ref_prog=torch.matmul, rtol=1e-3, atol=1e-4 * k**0.5, verbose=False,
        )(factory)  # fmt: skip
        tuned(m, n, k)
        result = tuned.get_tuner_result(m, n, k)
        ok = sum(t.ok for t in result.trials)
        how = "a cache hit" if result.cache_hit else "tuned"
        print(f"{shape}: {len(space):,} configs, {ok:,} passed, best {result.latency:.4f} ms "
              f"{result.config}; {time.perf_counter() - start:.0f} s ({how})",
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
