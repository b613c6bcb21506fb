"""Which thread pool, thread count and spin setting to run a tuned CPU kernel with, quiet and shared.

    python bench/thread_pool.py [--sizes 256 512] [--loads 0 1 2] [--rounds 6] [--repeats 4]
                                [--spins tileauto default 0 auto 3000] [--sample-ms 25]
                                [--json PATH] [--quick]

``tileauto`` is tileauto's own thread pool (``tileauto.jit.launcher``, what a user gets with
nothing set); every other setting runs the kernel on TVM's pool (``TILEAUTO_THREAD_POOL=tvm``)
with that spin setting, as tileauto did before it had its pool.

TVM's thread pool keeps its worker threads spinning for a while after each parallel launch
(``TVM_THREAD_POOL_SPIN_COUNT``, 300000 by default, read when the pool starts). On a quiet
machine that saves a wake-up per launch; when other processes want the cores, the spinning
workers take time slices from the thread that has the work. tileauto therefore turns the spin
off in a process that finds the machine busy when its first pool starts (``tileauto.jit.thread_pool``,
unless the variable is set). This benchmark measures the tuned GEMM of ``examples/gemm_cpu.py``
(tuned with tileauto's thread-count rule: every core) each way:

- it tunes every size once, up front, in a fresh process with nothing set (a private cache in a
  temporary folder, removed at the end), so that every later process is a cache hit;
- for each load (``--loads``: 0, 1, 2 busy processes, ``while True: pass``, started by the bench
  for that block and always killed at its end, on errors and Ctrl-C too), for each spin setting
  (``--spins``: ``default``, TVM's own, set to 300000 so that the rule does not decide;
  ``0``; ``auto``, left unset as a user leaves it, so the rule decides, and the table says
  what it chose; other counts when given; in the child's environment, since TVM reads it when
  the pool starts), it starts
  ``--repeats`` fresh processes per setting (the settings rotating, so each comes first in
  turn: A B, B A, ... for two; A B C, B C A, C A B, ... for three), as a user runs the kernel: no
  ``TVM_NUM_THREADS``, no ``TILEAUTO_NUM_THREADS``;
- each process loads every size from the cache and times the kernel with 1 thread and with the
  tuned count N (``kernel.use_threads``), interleaved: ``--rounds`` rounds, the order rotated
  every round; each round a sample of calls (as many as fill about ``--sample-ms``) gives its
  median call and its mean call (total time / calls, the throughput of back-to-back calls,
  which counts the calls stalled for a whole time slice that the median hides). A cell's figure
  is the median over the rounds of all its processes. Under load, processes differ far more
  than rounds do (where the scheduler puts the pool's threads is decided early and sticks: a
  process runs either near its quiet speed or a time slice per call); the cells whose processes
  differ by more than 2x are listed under the tables, with each process's median.

It prints two tables, the median call and the mean call (rows: load x size; columns: 1 thread
and N threads with each spin setting), each with the ratio (N threads, spin s) / (N threads,
default) for each other setting s, N threads / 1 thread, the row's fastest cell and how much slower
TVM's out-of-the-box setting (N threads, default spin) is than it; then per load a verdict (the
fastest setting over the sizes, and those within 5% of it at every size) and the one setting
that is never far from the best. The load average is printed before and during each block: the
busy processes add to it, and anything else running on the machine disturbs every figure.

The busy processes are in this process's session, like the measured ones: with the kernel's
autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``), load from another session
(another terminal) is shared per session rather than per thread, and hurts less.

A full run takes about 2 minutes on a 2-core machine; ``--quick`` (a smoke run, its figures are
not the ones to report): 256^3 only, one process per cell, 4 rounds, about 25 s. ``--json PATH``
also writes the figures to PATH.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# TVM's default spin count (set to it: unset, tileauto's busy-machine rule would decide), 0,
# and "auto" (unset: what a user gets, the rule of tileauto.jit.thread_pool); --spins chooses others
TVM_DEFAULT_SPIN = "300000"
SPINS: tuple[str, ...] = ("tileauto", "default", "0", "auto")
NEAR = 1.05  # within 5% of the row's best: as good, given the noise
SPLIT = 2.0  # a cell whose processes' medians differ by more: listed (a bimodal figure)
# Unset in every measured process: a user's run with nothing set. The cache switches are unset
# so that every process finds the up-front tuning in the cache.
UNSET = (
    "TVM_NUM_THREADS",
    "TVM_THREAD_POOL_SPIN_COUNT",
    "TILEAUTO_NUM_THREADS",
    "TILEAUTO_DISABLE_CACHE",
    "TILEAUTO_AUTO_TUNING_DISABLE_CACHE",
    "TILEAUTO_DISABLE_AUTOTUNE",
    "DISABLE_AUTOTUNE",  # another tuner's name that tileauto reads too
)
# A busy process that also exits when its parent is gone (a bench killed with SIGKILL).
BUSY = (
    "import os\n"
    "p = os.getppid()\n"
    "while os.getppid() == p:\n"
    "    for _ in range(1000000):\n"
    "        pass\n"
)


# -- the child processes ----------------------------------------------------------------------
def child(mode: str, sizes: list[int], rounds: int, sample_ms: float) -> None:
    """Tune (``tune``) or time (``time``) the GEMM at every size; report on stdout."""
    sys.path.insert(0, str(ROOT / "examples"))
    import gemm_cpu
    import torch

    import tileauto
    from tileauto._native import native_available, time_function
    from tileauto.jit.thread_pool import current_decision

    tuned = tileauto.autotune(configs=gemm_cpu.configs, verbose=False)(gemm_cpu.matmul)
    report: dict = {
        "pool_env": os.environ.get("TILEAUTO_THREAD_POOL"),
        "spin_env": os.environ.get("TVM_THREAD_POOL_SPIN_COUNT"),
        "tvm_num_threads_env": os.environ.get("TVM_NUM_THREADS"),
        "native_timer": native_available(),
        "load_start": os.getloadavg()[0],
        "sizes": {},
    }
    for size in sizes:
        start = time.perf_counter()
        kernel = tuned(size, size, size)
        got_s = time.perf_counter() - start
        result = tuned.get_tuner_result(size, size, size)
        threads = kernel.num_threads or 1
        a, b = torch.rand(size, size), torch.rand(size, size)
        out = torch.empty(size, size)
        func = kernel.get_function()
        func(a, b, out)
        entry = {
            "cache_hit": result.cache_hit,
            "seconds": got_s,
            "tuned_threads": threads,
            "tuned_ms": result.latency,
            "pool": kernel.thread_pool,
            "correct": bool(torch.allclose(out, a @ b, atol=1e-3, rtol=1e-3)),
        }
        report["sizes"][str(size)] = entry
        if mode == "tune":
            continue
        counts = list(dict.fromkeys((1, threads)))
        args = [a, b, out]
        repeat, pool = {}, {}
        for t in counts:  # how many calls fill about sample_ms, at this load
            pool[t] = kernel.use_threads(t)
            func(*args)
            one = statistics.median(time_function(func, args, 5)) / 1e6
            repeat[t] = max(5, min(2000, round(sample_ms / max(one, 1e-6))))
        per: dict[int, list[float]] = {t: [] for t in counts}
        per_mean: dict[int, list[float]] = {t: [] for t in counts}
        for r in range(rounds):
            k = r % len(counts)
            for t in counts[k:] + counts[:k]:  # the order rotated every round
                kernel.use_threads(t)
                func(*args)
                ns = time_function(func, args, repeat[t])
                per[t].append(statistics.median(ns) / 1e6)
                per_mean[t].append(statistics.fmean(ns) / 1e6)
        kernel.use_threads(threads)
        entry.update(
            pool_threads={str(t): pool[t] for t in counts},
            repeat={str(t): repeat[t] for t in counts},
            rounds_ms={str(t): per[t] for t in counts},
            rounds_mean_ms={str(t): per_mean[t] for t in counts},
        )
    report["load_end"] = os.getloadavg()[0]
    decision = current_decision()  # made when the first kernel was loaded
    report["spin_rule"] = None if decision is None else decision.source
    report["spin_final"] = os.environ.get("TVM_THREAD_POOL_SPIN_COUNT")
    print("REPORT " + json.dumps(report), flush=True)


def child_env(cache_dir: Path, spin: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env["TILEAUTO_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if spin is not None and spin != "tileauto":
        env["TILEAUTO_THREAD_POOL"] = "tvm"
    if spin is not None and spin not in ("auto", "tileauto"):
        env["TVM_THREAD_POOL_SPIN_COUNT"] = TVM_DEFAULT_SPIN if spin == "default" else spin
    return env


def run_child(
    mode: str, cache_dir: Path, spin: str | None, sizes: list[int], rounds: int, sample_ms: float
) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--rounds", str(rounds)]
    cmd += ["--sample-ms", str(sample_ms), "--sizes", *map(str, sizes)]
    proc = subprocess.run(
        cmd, env=child_env(cache_dir, spin), capture_output=True, text=True, timeout=600
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"the {mode} child (spin {spin}) failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )
    report = json.loads(lines[-1][len("REPORT ") :])
    want = {None: None, "auto": None, "tileauto": None, "default": TVM_DEFAULT_SPIN}.get(spin, spin)
    pool = "tileauto" if spin in (None, "tileauto") else "tvm"
    if report["spin_env"] != want or report["tvm_num_threads_env"] is not None:
        raise SystemExit(f"the {mode} child ran with a wrong environment: {report}")
    for size, e in report["sizes"].items():
        if mode == "time" and not e["cache_hit"]:
            raise SystemExit(
                f"the {size}^3 kernel was tuned again in a timing process (no cache hit)"
            )
        if not e["correct"]:
            raise SystemExit(f"the {size}^3 kernel's result differs from torch's")
        if e["pool"] != pool:
            raise SystemExit(f"{size}^3 ran on {e['pool']}'s pool, not {pool}'s (spin {spin})")
        bad = {t: p for t, p in e.get("pool_threads", {}).items() if p != int(t)}
        if bad:
            raise SystemExit(f"{size}^3: TVM's pool ran {bad} threads instead of the count set")
    return report


# -- the load ---------------------------------------------------------------------------------
def start_busy(n: int, procs: list[subprocess.Popen]) -> None:
    """Start ``n`` busy processes into ``procs`` (the caller's list: its ``finally`` stops every
    one started, even when an error or a Ctrl-C comes while they start). They are in this
    session, like the measured processes (see the docstring: autogroup scheduling)."""
    for _ in range(n):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", BUSY],
                stdin=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # no traceback when a Ctrl-C reaches them too
            )
        )


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def _sigterm(signum, frame):  # a SIGTERM unwinds like Ctrl-C: the finally blocks run
    raise SystemExit(128 + signum)


# -- the figures ------------------------------------------------------------------------------
def name_of(spin: str) -> str:
    """A setting as the tables name it: ``tileauto`` (its pool), ``spin S`` (TVM's pool)."""
    return "tileauto" if spin == "tileauto" else f"spin {spin}"


def label_of(key: str) -> str:
    """``"0/2"`` -> ``"2 thr spin 0"``: a cell's key (spin/threads) as the table names it."""
    spin, threads = key.split("/")
    return f"{threads} thr {name_of(spin)}"


STATS = ("median", "mean")  # per sample: the median call, and the mean (the batch's throughput)


def summarize(loads: list[int], sizes: list[int], n: int, reports: dict) -> list[dict]:
    """One row per load x size: each cell's figures over rounds and processes, and per statistic
    (``median``: the median call; ``mean``: the sample's total time / calls) the ratios."""
    rows = []
    for load in loads:
        for size in sizes:
            row: dict = {"load": load, "size": size, "cells": {}}
            for spin in SPINS:
                for t in dict.fromkeys((1, n)):
                    got = [r["sizes"][str(size)] for r in reports[load][spin]]
                    med = [x for e in got for x in e["rounds_ms"][str(t)]]
                    mean = [x for e in got for x in e["rounds_mean_ms"][str(t)]]
                    q = statistics.quantiles(med, n=5) if len(med) > 1 else med * 4
                    row["cells"][f"{spin}/{t}"] = {
                        "spin": spin,
                        "threads": t,
                        "median_ms": statistics.median(med),  # over rounds: robust to a slow one
                        "mean_ms": statistics.median(mean),
                        "p20_ms": q[0],
                        "p80_ms": q[3],
                        "process_medians_ms": [
                            statistics.median(e["rounds_ms"][str(t)]) for e in got
                        ],
                    }
            for stat in STATS:
                ms = {k: c[f"{stat}_ms"] for k, c in row["cells"].items()}
                best = min(ms, key=ms.get)
                row[stat] = {
                    "vs_default": {s: ms[f"{s}/{n}"] / ms[f"default/{n}"] for s in SPINS},
                    "threads_vs_one": {s: ms[f"{s}/{n}"] / ms[f"{s}/1"] for s in SPINS},
                    "best": best,
                    "best_label": label_of(best),
                    "default_vs_best": ms[f"default/{n}"] / ms[best],
                    "vs_best": {k: v / ms[best] for k, v in ms.items()},
                    "near_best": [k for k, v in ms.items() if v <= NEAR * ms[best]],
                }
                if "0" in SPINS:
                    row[stat]["spin0_vs_default"] = row[stat]["vs_default"]["0"]
            rows.append(row)
    return rows


def verdicts(loads: list[int], rows: list[dict], stat: str) -> dict:
    """Per load: the fastest setting (the smallest geometric mean over sizes of its ratio to
    each row's best), and the one setting whose worst ratio over every row is the smallest."""
    out: dict = {"loads": {}}
    keys = list(rows[0][stat]["vs_best"])
    for load in loads:
        mine = [r[stat] for r in rows if r["load"] == load]
        geo = {k: math.exp(statistics.fmean(math.log(r["vs_best"][k]) for r in mine)) for k in keys}
        best = min(geo, key=geo.get)
        out["loads"][str(load)] = {
            "best": best,
            "best_label": label_of(best),
            "geomean_vs_best": geo,
            "fastest_at_every_size": all(r["best"] == best for r in mine),
            "also_within_5pct": [
                k for k in keys if k != best and all(k in r["near_best"] for r in mine)
            ],
        }
    worst = {k: max(r[stat]["vs_best"][k] for r in rows) for k in keys}
    pick = min(worst, key=worst.get)
    out["overall"] = {"best": pick, "best_label": label_of(pick), "worst_vs_best": worst}
    return out


def print_table(rows: list[dict], n: int, stat: str) -> None:
    """Per spin setting: 1 and n threads (ms); then n threads with each other spin / with the
    default spin, n threads / 1 thread per spin, the row's best and the default's distance."""
    others = [sp for sp in SPINS if sp != "default"]
    head1 = "".join(f"{name_of(sp):>18}" for sp in SPINS) + "   "
    head1 += "".join(f"{f'{n} thr: {name_of(sp)}':>18}" for sp in others)
    head1 += f"{f'{n} thr / 1 thr':>{8 * len(SPINS)}}   {'best of row':<20}{f'{n} thr default':>15}"
    head2 = "".join(f"{'1 thr':>9}{f'{n} thr':>9}" for _ in SPINS) + "   "
    head2 += "".join(f"{'/ default':>18}" for _ in others)
    head2 += "".join(f"{sp:>8}" for sp in SPINS)
    head2 += f"   {f'({stat} ms)':<20}{'/ best':>15}"
    print(f"{'':16}{head1}")
    print(f"{'load':<6}{'size':<10}{head2}")
    for r in rows:
        c = {k: v[f"{stat}_ms"] for k, v in r["cells"].items()}
        f = r[stat]
        line = f"{r['load']:<6}{str(r['size']) + '^3':<10}"
        line += "".join(f"{c[f'{sp}/1']:>9.3f}{c[f'{sp}/{n}']:>9.3f}" for sp in SPINS) + "   "
        line += "".join(f"{f['vs_default'][sp]:>18.2f}" for sp in others)
        line += "".join(f"{f['threads_vs_one'][sp]:>8.2f}" for sp in SPINS)
        line += f"   {f['best_label']:<20}{f['default_vs_best']:>15.2f}"
        print(line)


def split_cells(rows: list[dict]) -> list[str]:
    """The cells whose processes' medians differ by more than ``SPLIT`` x."""
    out = []
    for r in rows:
        for key, c in r["cells"].items():
            got = c["process_medians_ms"]
            if max(got) > SPLIT * min(got):
                shown = " ".join(f"{x:.3f}" for x in got)
                out.append(f"load {r['load']}, {r['size']}^3, {label_of(key)}: {shown}")
    return out


def print_verdicts(loads: list[int], v: dict, n: int, stat: str) -> None:
    for load in loads:
        e = v["loads"][str(load)]
        where = "at every size" if e["fastest_at_every_size"] else "overall (geomean over sizes)"
        near = "; ".join(
            f"{label_of(k)} ({e['geomean_vs_best'][k]:.2f}x)" for k in e["also_within_5pct"]
        )
        out_of_box = e["geomean_vs_best"][f"default/{n}"] / e["geomean_vs_best"][e["best"]]
        print(
            f"verdict ({stat}), load {load} ({load} busy process{'es' if load != 1 else ''}): "
            f"fastest {e['best_label']} {where}"
            + (f"; within 5% at every size: {near}" if near else "")
            + f"; {n} thr default is {out_of_box:.2f}x it"
        )
    o = v["overall"]
    w = o["worst_vs_best"]
    others = "; ".join(f"{label_of(k)} {x:.2f}x" for k, x in w.items() if k != o["best"])
    print(
        f"one setting for every load and size ({stat}): {o['best_label']}, at most "
        f"{w[o['best']]:.2f}x the row's best (the others at most: {others})"
    )


def main(argv: list[str] | None = None) -> int:
    global SPINS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512], help="M = N = K")
    parser.add_argument(
        "--loads", type=int, nargs="+", default=[0, 1, 2], help="busy processes per block"
    )
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds per process")
    parser.add_argument("--repeats", type=int, default=4, help="fresh processes per cell")
    parser.add_argument("--sample-ms", type=float, default=25.0, help="calls per sample: ~ms")
    parser.add_argument("--settle-s", type=float, default=1.0, help="wait after starting load")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--spins",
        nargs="+",
        default=list(SPINS),
        help="settings: 'tileauto' (tileauto's pool, nothing set), and on TVM's pool "
        "'default' (TVM's spin, 300000), 'auto' (unset: tileauto's busy-machine rule decides) "
        "and TVM_THREAD_POOL_SPIN_COUNT values (default: tileauto default 0 auto)",
    )
    parser.add_argument("--quick", action="store_true", help="256^3, one process, few rounds")
    parser.add_argument("--child", choices=("tune", "time"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.sizes, args.rounds, args.sample_ms)
        return 0
    if args.quick:
        args.sizes, args.rounds, args.repeats, args.sample_ms = [256], 4, 1, 10.0
        args.settle_s = 0.5
    if min(args.loads) < 0 or args.rounds < 1 or args.repeats < 1:
        parser.error("--loads must be >= 0, --rounds and --repeats >= 1")
    named = ("default", "auto", "tileauto")
    if "default" not in args.spins or not all(sp in named or sp.isdigit() for sp in args.spins):
        parser.error(
            "--spins: expected 'default', optionally 'tileauto' and 'auto', and spin counts "
            f"(integers >= 0), got {args.spins}"
        )
    SPINS = tuple(dict.fromkeys(["default", *args.spins]))
    signal.signal(signal.SIGTERM, _sigterm)
    start_all, load_start = time.perf_counter(), os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="tileauto-thread-pool-"))
    load_avg: dict[str, dict[str, float]] = {}
    reports: dict[int, dict[str, list[dict]]] = {}
    try:
        tune = run_child("tune", base, None, args.sizes, 1, args.sample_ms)
        threads = {e["tuned_threads"] for e in tune["sizes"].values()}
        if len(threads) != 1:
            raise SystemExit(f"the sizes were tuned with different thread counts: {threads}")
        n = threads.pop()
        tune_s = time.perf_counter() - start_all
        print(
            f"thread pool: tuned GEMM of examples/gemm_cpu.py, {os.cpu_count()} cores, tuned with "
            f"{n} threads (nothing set), tuning {tune_s:.1f} s; load average {load_start:.2f} "
            f"at the start; {args.repeats} fresh process(es) per cell x {args.rounds} "
            f"interleaved rounds, ~{args.sample_ms:g} ms of calls per sample; native timer "
            f"{'on' if tune['native_timer'] else 'off'}",
            flush=True,
        )
        if n == 1:
            print("  (tuned with 1 thread: the 1-thread and N-thread columns are the same runs)")
        for load in args.loads:
            before = os.getloadavg()[0]
            busy: list[subprocess.Popen] = []
            try:
                start_busy(load, busy)
                time.sleep(args.settle_s if load else 0.0)
                reports[load] = {s: [] for s in SPINS}
                order = [  # the settings rotate, so each is first in some repeat
                    SPINS[(i + r) % len(SPINS)]
                    for r in range(args.repeats)
                    for i in range(len(SPINS))
                ]
                for spin in order:
                    reports[load][spin].append(
                        run_child("time", base, spin, args.sizes, args.rounds, args.sample_ms)
                    )
                    dead = [p.returncode for p in busy if p.poll() is not None]
                    if dead:
                        raise SystemExit(f"a busy process exited early ({dead})")
                during = [r["load_start"] for s in SPINS for r in reports[load][s]]
            finally:
                stop_busy(busy)
            load_avg[str(load)] = {"before": before, "during_max": max(during)}
            auto = [r["spin_final"] for r in reports[load].get("auto", [])]
            chose = (
                f"; auto: the rule turned the spin off in {auto.count('0')} of {len(auto)}"
                if auto
                else ""
            )
            print(
                f"  load {load}: {len(order)} processes, load average {before:.2f} before the "
                f"block, up to {max(during):.2f} during it{chose}",
                flush=True,
            )
    except KeyboardInterrupt:
        print("interrupted: the busy processes are stopped", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows = summarize(args.loads, args.sizes, n, reports)
    verdict = {stat: verdicts(args.loads, rows, stat) for stat in STATS}
    print(
        f"\n1 thr / {n} thr: kernel.use_threads; tileauto: tileauto's thread pool (nothing set); "
        f"spin N: TVM's pool (TILEAUTO_THREAD_POOL=tvm), TVM_THREAD_POOL_SPIN_COUNT=N (default: "
        f"TVM's 300000; auto: unset, tileauto's busy-machine rule decides); best of row: the "
        f"fastest of the {2 * len(SPINS)}; last column: {n} threads on TVM's pool with its "
        f"default spin (TVM out of the box) / the best"
    )
    print("\nmedian ms per call (the median of each sample's calls; median over rounds):")
    print_table(rows, n, "median")
    print(
        "\nmean ms per call (each sample's total time / calls, i.e. back-to-back throughput; "
        "counts the calls stalled for a time slice that the median hides; median over rounds):"
    )
    print_table(rows, n, "mean")
    split = split_cells(rows)
    if split:
        print(f"\ncells whose processes differ by more than {SPLIT:g}x (each process's median ms):")
        for line in split:
            print(f"  {line}")
    for stat in STATS:
        print()
        print_verdicts(args.loads, verdict[stat], n, stat)
    total_s = time.perf_counter() - start_all
    load_end = os.getloadavg()[0]
    print(f"whole run {total_s:.0f} s; load average {load_end:.2f} at the end")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        figures = {
            "quick": args.quick,
            "sizes": args.sizes,
            "loads": args.loads,
            "tuned_threads": n,
            "spins": list(SPINS),
            "rounds": args.rounds,
            "repeats": args.repeats,
            "cores": os.cpu_count(),
            "load_average_start": load_start,
            "load_average_end": load_end,
            "load_average": load_avg,
            # per load: TVM_THREAD_POOL_SPIN_COUNT in each "auto" process after its kernels
            # were loaded (what the busy-machine rule chose: "0", or None for TVM's default)
            "auto_spin": {
                str(load): [r["spin_final"] for r in reports[load].get("auto", [])]
                for load in args.loads
            },
            "seconds": total_s,
            "rows": rows,
            "verdicts": verdict,
        }
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
