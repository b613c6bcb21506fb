"""A fresh process with a warm cache: how fast the tuned kernel is ready, and how fast it runs.

    python bench/warm_start.py [--runs 3] [--size 512]

Tunes the real GEMM space (``examples/gemm_cpu.py``, 16 configs) in a fresh process with an
empty cache (cold), then starts fresh processes that find it in the cache (warm), as a user's
script does: no ``TVM_NUM_THREADS``, nothing set. Each child reports its own breakdown:

- import: ``import tileauto``;
- load: ``kernel = matmul(...)`` answered by the disk cache (verify, read, load the library);
- first call: the first call of the kernel;
- whether it compiled anything or started a worker process (a warm start must not);
- the kernel's speed there: the thread count it runs with, and its median call time against
  the tuned median and p20-p80 spread, measured interleaved (10 rounds) with the same kernel
  forced to one thread, TVM's default on a 2-core machine.

The figures are the medians over ``--runs`` warm processes of the child's own times (not the
difference of two process start-up times, whose noise is larger than the figure). Targets:
load + first call <= 0.3 s of CPU (the process's CPU seconds, every thread: other processes
on the machine stretch the wall time by the share of a core they leave it, printed beside
it, but not the work); the warm process's median call within the tuned p20-p80 spread
(at most p80 / median of the tuned one, on the same machine minutes later).

Then the start-up as a whole (``bench/_startup.py``, ``--startup-rounds`` rounds, 0 skips
it): ``python -c "import torch"`` (the floor), ``import tileauto``, ``tileauto --help`` and a
warm process (import, cache hit, first call, exit), from start to exit, with bytecode caches
on and off; ``--baseline-tree DIR`` (a copy of ``tileauto/`` and ``examples/`` from before)
runs side by side. Targets: warm process <= 1.15 x the floor + the library load;
``tileauto --help`` <= 0.3 s.
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
FIRST_CALL_S = 0.05  # issue 38: the decorated call answered by the cache (runtime load in it)
LOOKUP_NS = 1000  # issue 38: the decorated factory called again with the same arguments


def child(mode: str, size: int) -> None:
    """Import tileauto, get the tuned kernel, call it; report on stdout.

    ``warm-runtime``: TVM's runtime (``tvm_ffi``) is imported, and the garbage collector run,
    before the timed call, as in a process that imported TVM at its start.
    """
    import gc

    start = time.perf_counter()
    sys.path.insert(0, str(ROOT / "examples"))
    import tileauto

    imported = time.perf_counter()
    import gemm_cpu
    import psutil
    import torch

    from tileauto._native import time_function
    from tileauto.jit import compiler, launcher, runtime  # runtime: loads without the compiler

    tuned = tileauto.autotune(configs=gemm_cpu.configs, verbose=False)(gemm_cpu.matmul)
    env_before = os.environ.get("TVM_NUM_THREADS")
    a, b = torch.rand(size, size), torch.rand(size, size)
    if mode == "warm-runtime":
        import tvm_ffi  # noqa: F401

        gc.collect()
    collections: list[float] = []  # CPU seconds of the full collections during the call

    def count(phase: str, info: dict) -> None:
        if info["generation"] == 2:
            collections.append(time.process_time() * (1 if phase == "stop" else -1))

    gc.callbacks.append(count)
    loaded, loaded_cpu = time.perf_counter(), time.process_time()
    kernel = tuned(size, size, size)
    got, got_cpu = time.perf_counter(), time.process_time()
    gc.callbacks.remove(count)
    c = kernel(a, b)
    ready, ready_cpu = time.perf_counter(), time.process_time()
    result = tuned.get_tuner_result(size, size, size)
    import timeit

    # the lookup: the decorated factory called again with the same sizes (best of 5 x 20,000)
    lookup_s = min(timeit.repeat(lambda: tuned(size, size, size), number=20_000, repeat=5))
    report = {
        "import_s": imported - start,
        "load_s": got - loaded,
        "load_cpu_s": got_cpu - loaded_cpu,
        "lookup_ns": lookup_s / 20_000 * 1e9,
        "full_gc_s": sum(collections),
        "first_call_s": ready - got,
        "ready_cpu_s": ready_cpu - loaded_cpu,  # every thread of the process
        "cache_hit": result.cache_hit,
        "compiles": compiler.COMPILES.count,
        "worker_processes": len(psutil.Process().children(recursive=True)),
        "correct": bool(torch.allclose(c, a @ b, atol=1e-3, rtol=1e-3)),
        "tvm_num_threads_env": env_before,
        "kernel_threads": kernel.num_threads,
        "configs": len(result.trials),
        "tvm_imported": "tvm" in sys.modules,  # the compiler's package (the runtime is not)
    }
    if mode.startswith("warm"):
        best = next(t for t in result.trials if t.config == result.config and t.ok)
        func, out = kernel.get_function(), torch.empty(size, size)
        tuned_threads = kernel.num_threads or 1
        per: dict[int, list[float]] = {tuned_threads: [], 1: []}
        for r in range(10):
            for threads in (tuned_threads, 1) if r % 2 == 0 else (1, tuned_threads):
                kernel.use_threads(threads)
                func(a, b, out)
                per[threads].append(statistics.median(time_function(func, [a, b, out], 20)) / 1e6)
        kernel.use_threads(tuned_threads)
        report.update(
            # the count the kernel's pool runs with: tileauto's (jit/launcher.py) or TVM's
            pool=kernel.thread_pool,
            pool_threads=(
                launcher.threads() if kernel.thread_pool == "tileauto" else runtime.num_threads()
            ),
            median_ms=statistics.median(per[tuned_threads]),
            one_thread_ms=statistics.median(per[1]),
            tuned_median_ms=best.latency.median_ms,
            tuned_p20_ms=best.latency.p20_ms,
            tuned_p80_ms=best.latency.p80_ms,
            load=os.getloadavg()[0],
        )
    print("READY " + json.dumps(report), flush=True)


def run(mode: str, cache_dir: Path, size: int, tree: Path | None = None) -> tuple[float, dict]:
    """Start a child (of ``tree``, a baseline copy of tileauto, when given); return (seconds
    until it was ready, its report)."""
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}  # as a user runs it
    env["TILEAUTO_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    argv = [str(Path(__file__).resolve()), "--child", mode, "--size", str(size)]
    cmd = [sys.executable, *argv]
    if tree is not None:  # the baseline's package wins over the editable install
        from _startup import _PRELUDE  # bench/ is this script's folder

        code = (
            f"import runpy; sys.argv = {argv!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
        )
        cmd = [sys.executable, "-c", _PRELUDE.format(tree=str(tree.resolve())) + code]
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


def first_call_lines(calls: dict[tuple[str, str], list[dict]], runs: int) -> list[str]:
    """The warm first call (``kernel = tuned(...)``) against FIRST_CALL_S, and before/now."""

    def med(name: str, mode: str, key: str) -> float:
        return statistics.median(r[key] for r in calls[(name, mode)])

    lines = [
        f"  first call of the decorated factory, warm cache (median of {runs}): wall, CPU, and "
        f"the CPU of the full garbage collections it triggered; target <= {FIRST_CALL_S} s"
    ]
    for name in ("before", "now"):
        if (name, "warm") not in calls:
            continue
        for mode, label in (("warm", "as a user runs it"), ("warm-runtime", "TVM's runtime in")):
            wall, cpu = med(name, mode, "load_s"), med(name, mode, "load_cpu_s")
            gc_s = med(name, mode, "full_gc_s")
            # judged on CPU seconds, which other processes on the machine do not stretch
            verdict = "met" if cpu <= FIRST_CALL_S else "MISSED"
            lines.append(
                f"    {name:<6} {label:<18} wall {wall:.3f} s, CPU {cpu:.3f} s (full GC "
                f"{gc_s:.3f} s; CPU without it {cpu - gc_s:.3f} s): {verdict if name == 'now' else ''}"
            )
    for name in ("before", "now"):
        if (name, "warm") in calls:
            ns = med(name, "warm", "lookup_ns")
            verdict = f": {'met' if ns <= LOOKUP_NS else 'MISSED'}" if name == "now" else ""
            lines.append(
                f"    {name:<6} the lookup (the same call again): {ns:.0f} ns "
                f"(target <= {LOOKUP_NS} ns){verdict}"
            )
    if ("before", "warm") in calls:
        for mode, label in (("warm", "as a user runs it"), ("warm-runtime", "TVM's runtime in")):
            was, now = med("before", mode, "load_cpu_s"), med("now", mode, "load_cpu_s")
            lines.append(f"    before / now, {label}: CPU {was / now:.1f}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="warm processes")
    parser.add_argument("--size", type=int, default=512, help="GEMM size (M = N = K)")
    parser.add_argument("--child", choices=("warm", "warm-runtime", "cold"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--startup-rounds", type=int, default=3, help="start-up rounds (0: skip the start-up)"
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        metavar="DIR",
        help="a copy of tileauto/ and examples/ from before, measured side by side",
    )
    args = parser.parse_args()
    if args.child:
        child(args.child, args.size)
        return
    base = Path(tempfile.mkdtemp(prefix="tileauto-warm-start-"))
    trees = {"now": None, **({"before": args.baseline_tree} if args.baseline_tree else {})}
    calls: dict[tuple[str, str], list[dict]] = {}
    try:
        cold_s, cold = run("cold", base / "now", args.size)
        if args.baseline_tree:
            run("cold", base / "before", args.size, args.baseline_tree)
        warm = []
        for r in range(args.runs):  # interleaved: a slow spell hits every kind alike
            for name, tree in trees.items() if r % 2 == 0 else list(trees.items())[::-1]:
                for mode in ("warm", "warm-runtime"):
                    got = run(mode, base / name, args.size, tree)[1]
                    calls.setdefault((name, mode), []).append(got)
                    if name == "now" and mode == "warm":
                        warm.append(got)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in warm)

    ready = statistics.median(r["load_s"] + r["first_call_s"] for r in warm)
    w = warm[-1]
    spread_limit = w["tuned_p80_ms"] / w["tuned_median_ms"]
    vs_tuned = med("median_ms") / w["tuned_median_ms"]
    print(f"warm start: GEMM {args.size}^3, {w['configs']} configs, fresh processes, nothing set")
    print(
        f"  cold process: start -> ready {cold_s:.2f} s (import {cold['import_s']:.2f} s, "
        f"tune {cold['load_s']:.2f} s, first call {cold['first_call_s']:.3f} s)"
    )
    print(
        f"  warm process (median of {args.runs}): import {med('import_s'):.3f} s, load "
        f"{med('load_s'):.3f} s, first call {med('first_call_s'):.4f} s; cache hit "
        f"{w['cache_hit']}, compiles {w['compiles']}, worker processes {w['worker_processes']}, "
        f"correct {w['correct']}"
    )
    for line in first_call_lines(calls, args.runs):
        print(line)
    ready_cpu = statistics.median(r["ready_cpu_s"] for r in warm)
    all_warm = all(
        r["cache_hit"] and r["compiles"] == 0 and r["worker_processes"] == 0 for r in warm
    )
    print(
        f"  load + first call {ready:.3f} s, CPU {ready_cpu:.3f} s (the process had "
        f"{ready_cpu / ready:.2f} of a core)"
    )
    ok_cpu = ready_cpu <= TARGET_S
    print(
        f"  load + first call in CPU seconds {ready_cpu:.3f} s (target <= {TARGET_S} s: "
        f"{'met' if ok_cpu and all_warm else 'MISSED'}; judged on the CPU the process used, "
        f"which other processes do not change: the wall above is it over the share of a "
        f"core the process got)"
    )
    print(
        f"  runs with {w['kernel_threads']} threads ({w.get('pool')} pool {w['pool_threads']}, "
        f"TVM_NUM_THREADS at start {w['tvm_num_threads_env']}): median call {med('median_ms'):.3f} ms "
        f"vs tuned {w['tuned_median_ms']:.3f} ms (p20-p80 {w['tuned_p20_ms']:.3f}-"
        f"{w['tuned_p80_ms']:.3f}); forced to 1 thread {med('one_thread_ms'):.3f} ms; load "
        f"{min(r['load'] for r in warm):.2f}-{max(r['load'] for r in warm):.2f}"
    )
    same = all(r["pool_threads"] == r["kernel_threads"] for r in warm)
    print(
        f"  thread count: tuned {w['kernel_threads']}, the kernel's pool runs {w['pool_threads']} "
        f"({'met' if same else 'MISSED'}: equal in every warm process)"
    )
    print(
        f"  warm median / tuned median {vs_tuned:.2f} (target <= p80 / median "
        f"{spread_limit:.2f}: {'met' if vs_tuned <= spread_limit else 'MISSED'}); "
        f"1 thread / tuned threads {med('one_thread_ms') / med('median_ms'):.2f}"
    )
    compiler = [r["tvm_imported"] for r in warm]
    print(
        f"  warm processes that imported TVM's compiler: {sum(compiler)} of {len(compiler)} "
        f"(target 0: {'met' if not any(compiler) else 'MISSED'})"
    )
    if args.startup_rounds > 0:
        from _startup import measure, report  # bench/ is this script's folder

        lines, _ = report(measure(args.size, args.startup_rounds, args.baseline_tree))
        print("\n".join(lines))


if __name__ == "__main__":
    main()
