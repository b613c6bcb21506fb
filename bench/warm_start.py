"""Time from process start to a ready tuned kernel, with a warm cache and a cold one.

    python bench/warm_start.py [--runs 3] [--size 256]

Runs fresh Python processes and prints, in one run:

- import: ``import tileauto`` alone (the floor every process pays);
- warm: import, then ``kernel = matmul(...)`` answered by the disk cache, then one call;
- cold: the same with an empty cache (tuning the config space first).

Each time is wall clock from ``subprocess`` start until the child reports that it is ready
(interpreter start included, interpreter exit not), the median of ``--runs`` processes
(cold: one process per run, each with a new empty cache). The target: warm - import <= 0.3 s.
The child also reports its own breakdown (import, tune-or-load, first call), and whether the
warm process compiled anything or started a worker process (it must not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.3


def matmul(M: int, N: int, K: int, bm: int = 16, bn: int = 16, vec: int = 4):
    """``C = A @ B`` tiled by ``bm x bn``, the inner ``j`` loop vectorized by ``vec``."""
    from tvm import s_tir, te

    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    io, ii = sch.split(i, [None, bm])
    jo, ji = sch.split(j, [None, bn])
    jio, jiv = sch.split(ji, [None, vec])
    sch.reorder(io, jo, kk, ii, jio, jiv)
    sch.vectorize(jiv)
    sch.parallel(sch.fuse(io, jo))
    sch.decompose_reduction(blk, kk)
    return sch.mod["main"]


CONFIGS = [{"bm": m, "bn": n, "vec": 8} for m in (8, 16, 32) for n in (16, 32)]


def child(mode: str, size: int) -> None:
    """Import tileauto, get the tuned kernel, call it once; report on stdout."""
    start = time.perf_counter()
    import tileauto

    imported = time.perf_counter()
    if mode == "import":
        print("READY " + json.dumps({"import_s": imported - start}), flush=True)
        return
    import psutil
    import torch

    from tileauto.jit import compiler

    tuned = tileauto.autotune(configs=CONFIGS, warmup=3, rep=10, verbose=False)(
        tileauto.jit(out_idx=[-1], target="llvm")(matmul)
    )
    kernel = tuned(size, size, size)
    got = time.perf_counter()
    a, b = torch.rand(size, size), torch.rand(size, size)
    c = kernel(a, b)
    ready = time.perf_counter()
    report = {
        "import_s": imported - start,
        "kernel_s": got - imported,
        "first_call_s": ready - got,
        "cache_hit": tuned.get_tuner_result(size, size, size).cache_hit,
        "compiles": compiler.COMPILE_COUNT,
        "worker_processes": len(psutil.Process().children(recursive=True)),
        "correct": bool(torch.allclose(c, a @ b, atol=1e-3, rtol=1e-3)),
    }
    print("READY " + json.dumps(report), flush=True)


def run(mode: str, cache_dir: Path, size: int) -> tuple[float, dict]:
    """Start a child; return (seconds until it was ready, its report)."""
    env = os.environ.copy()
    env["TILEAUTO_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--size", str(size)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    report = None
    for line in proc.stdout:
        if line.startswith("READY "):
            elapsed = time.perf_counter() - start
            report = json.loads(line[len("READY ") :])
            break
    _, err = proc.communicate(timeout=600)
    if report is None or proc.returncode != 0:
        raise SystemExit(f"the {mode} child failed (exit {proc.returncode}):\n{err[-3000:]}")
    return elapsed, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="processes per measurement")
    parser.add_argument("--size", type=int, default=256, help="matmul size (M = N = K)")
    parser.add_argument("--child", choices=("import", "warm", "cold"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.size)
        return
    base = Path(tempfile.mkdtemp(prefix="tileauto-warm-start-"))
    try:
        cold, cold_reports = [], []
        for i in range(args.runs):
            seconds, report = run("cold", base / f"cold-{i}", args.size)
            cold.append(seconds)
            cold_reports.append(report)
        warm_cache = base / "cold-0"  # tuned by the first cold run
        warm, warm_reports, imports = [], [], []
        for _ in range(args.runs):  # interleaved, so that machine load hits both alike
            imports.append(run("import", base / "unused", args.size)[0])
            seconds, report = run("warm", warm_cache, args.size)
            warm.append(seconds)
            warm_reports.append(report)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    imp, hot, cool = (statistics.median(x) for x in (imports, warm, cold))
    w = warm_reports[-1]
    print(f"warm start, process start -> ready tuned kernel (median of {args.runs})")
    print(f"  import tileauto only   {imp:7.3f} s   {_spread(imports)}")
    print(f"  warm cache             {hot:7.3f} s   {_spread(warm)}")
    print(f"  cold cache             {cool:7.3f} s   {_spread(cold)}")
    print(f"  warm - import          {hot - imp:+7.3f} s   (target <= {TARGET_S} s)")
    print(
        f"  warm process: load {statistics.median(r['kernel_s'] for r in warm_reports):.3f} s, "
        f"first call {statistics.median(r['first_call_s'] for r in warm_reports):.3f} s, "
        f"cache hit {w['cache_hit']}, compiles {w['compiles']}, "
        f"worker processes {w['worker_processes']}, correct {w['correct']}"
    )
    print(
        f"  cold process: tune {statistics.median(r['kernel_s'] for r in cold_reports):.3f} s "
        f"for {len(CONFIGS)} configs of a {args.size}^3 matmul"
    )
    ok = hot - imp <= TARGET_S and all(
        r["cache_hit"] and r["compiles"] == 0 and r["worker_processes"] == 0 for r in warm_reports
    )
    print("  verdict: " + ("OK" if ok else "MISSED the target"))


def _spread(values: list[float]) -> str:
    return f"(min {min(values):.3f}, max {max(values):.3f})" if len(values) > 1 else ""


if __name__ == "__main__":
    main()
