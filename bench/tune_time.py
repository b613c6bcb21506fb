"""How long tuning takes, against a floor measured apart, and what a second compile worker buys.

    python bench/tune_time.py [--size 512] [--warmup 25] [--rep 100] [--rounds 3]

Tunes the 16-config CPU GEMM space of ``examples/gemm_cpu.py`` (tuning cache off) and prints:

- wall: the whole tuning run (compile, validate, time, report);
- floor: what a perfect scheduler with the same workers would need, from measurements
  independent of that run: each config's compile timed alone (one worker, nothing else
  compiling), split between the workers as evenly as whole compiles allow (the best
  schedule: a compile cannot be cut in two), at what that many processes get done at once
  on this machine now (1 for one worker; for two, the machine's own 2-process speedup measured in
  the same rounds, below: 2 on 2 idle cores, about 1.5 with two busy processes, whose share
  of the cores is a fact of life and not tileauto's doing), plus each config's own kernel
  time (its mean call as tuned: the runs' total, which on a busy machine counts the calls
  stalled for a time slice that the median hides) times the calls the tuner makes of it
  (``warmup + rep`` and one check; for the re-timed contenders ``rep`` more and 2 warmup
  calls in each of the re-timing rounds). Two compiles slowing each other beyond sharing the
  cores, and everything tileauto does besides compiling and calling kernels, cannot count as
  necessary work, so wall / floor can miss;
- wall / floor, for a cold process (TVM not imported yet, worker processes start during the
  run: its floor adds TVM's import, timed alone in fresh processes) and a warm one,
  the cold process both as tileauto does it (workers forked from this process) and, in a
  fresh process started right after, with ``TILEAUTO_WORKER_START=forkserver``;
- the compile phase with 2 workers against 1 (the same 16 compiles), in ``--rounds``
  interleaved rounds: the median of the per-round speedups against the target (>= 1.6), the
  workers' CPU seconds per compile with 1 and 2 workers (equal when nothing but the cores is
  shared), and the load average, since other processes take cores from the workers;
- the machine's own speedup in the same rounds: a fixed amount of pure Python work in 1
  process against the same work in each of 2 processes at once (2.0 on 2 idle cores, less
  when other processes want the cores), and the compile speedup as a share of it, the
  parallel efficiency, against ``1.6 / 2 = 0.8`` (the 1.6x on 2 idle cores). The load is a
  fact of life: the efficiency is what tileauto controls (two compiles slowing each other
  beyond sharing the cores: threads inside TVM or LLVM, memory bandwidth), and it should not
  change verdict when busy processes take cores.

Then a re-tuning of the same space with other checks or timing, against a cold tuning, each
in a fresh process with a cache of its own (``--recheck-rounds`` rounds, 0 skips it;
``--only-recheck`` runs it alone): a cold tuning with ``ref_prog=torch.matmul``, then the same
space tuned without a reference (a compile and a measurement of every config are taken from
the first: issue 38), with ``rep`` doubled (the compiles are taken, every config is timed
again), and, for the figures before issue 38, the tuning without a reference with the caches
off (``TILEAUTO_DISABLE_CACHE=1``: every config compiled and measured again, which is what a
re-tuning under other checks cost before). Each reports its wall time, the configs it
compiled (a compile time of its own) and the measurements it took from the first tuning.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
os.environ["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
os.environ["TILEAUTO_DISABLE_CACHE"] = "1"

import gemm_cpu  # noqa: E402

from tileauto.build.builder import Builder, BuildRequest, compile_workers  # noqa: E402
from tileauto.build.job import build_all  # noqa: E402
from tileauto.options import ProfileArgs  # noqa: E402
from tileauto.settings import Settings  # noqa: E402
from tileauto.space import config_id  # noqa: E402
from tileauto.tune import defaults  # noqa: E402
from tileauto.tune._retime import RETIME_ROUNDS  # noqa: E402
from tileauto.tune.problem import TuningProblem  # noqa: E402

COMPILE_TARGET = 1.6
EFFICIENCY_TARGET = COMPILE_TARGET / 2  # of the machine's own 2-process speedup
FLOOR_TARGET = 1.25
SPIN_S = 1.0  # the reference work: about this long in one process on an idle core


def _space(size: int) -> list[dict]:
    return [{}, *gemm_cpu.configs(size, size, size)]  # {} is the default config


def compile_phase(size: int, workers: int) -> dict[str, float | list[float]]:
    """Compile the space with ``workers`` workers and nothing else: wall, CPU and per-config s."""
    space = _space(size)
    staging = Path(tempfile.mkdtemp(prefix="tileauto-bench-"))
    atexit.register(shutil.rmtree, staging, ignore_errors=True)  # the build's folders with it
    builder = Builder(
        gemm_cpu.gemm,
        gemm_cpu.matmul.compile_args,
        workers=workers,
        staging_dir=staging,
    )
    builder.start()
    pool = compile_workers(workers)
    for w in pool:
        w.start()

    def cpu() -> float:
        total = 0.0
        for w in pool:
            t = psutil.Process(w.pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        return total

    requests = [
        BuildRequest(index=i, config=c, args=(size, size, size)) for i, c in enumerate(space)
    ]
    cpu0, start = cpu(), time.perf_counter()
    results = build_all(builder, requests)
    wall, cpu_s = time.perf_counter() - start, cpu() - cpu0
    builder.close()
    shutil.rmtree(staging, ignore_errors=True)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    return {
        "wall": wall,
        "cpu": cpu_s,
        "per_config": [r.compile_s for r in results],
        "load": os.getloadavg()[0],
    }


def makespan(jobs: list[float], workers: int) -> float:
    """The shortest time ``workers`` equal workers can run ``jobs`` (indivisible) in.

    One worker: their sum. Two: the larger half of the most even split (a subset sum over
    millisecond steps, exact to the millisecond per job). More: greedy longest-first.
    """
    if workers == 1:
        return sum(jobs)
    if workers == 2:
        steps = [max(1, round(j * 1e3)) for j in jobs]
        reachable = 1  # bit k: some subset sums to k steps
        for st in steps:
            reachable |= reachable << st
        total = sum(steps)
        best = min(max(k, total - k) for k in range(total + 1) if reachable >> k & 1)
        return best / total * sum(jobs)
    loads = [0.0] * workers
    for j in sorted(jobs, reverse=True):
        loads[loads.index(min(loads))] += j
    return max(loads)


def _spin(n: int, conn) -> None:  # the reference work, in a forked process
    x = 0
    for i in range(n):
        x += i * i
    conn.send(x)


def calibrate_spin() -> int:
    """Loop iterations that take about SPIN_S in one process now."""
    n, start = 2_000_000, time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return max(1, int(n * SPIN_S / (time.perf_counter() - start)))


def spin_phase(n: int, procs: int) -> float:
    """Wall seconds for ``procs`` processes to each run the reference work of ``n`` steps."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    pipes = [ctx.Pipe(duplex=False) for _ in range(procs)]
    workers = [ctx.Process(target=_spin, args=(n, w)) for _, w in pipes]
    start = time.perf_counter()
    for p in workers:
        p.start()
    for r, _ in pipes:
        r.recv()
    wall = time.perf_counter() - start
    for p in workers:
        p.join()
    return wall


def tune_once(size: int, workers: int, warmup: int, rep: int) -> dict:
    os.environ["TILEAUTO_AUTO_TUNING_CPU_COUNTS"] = str(workers)
    problem = TuningProblem(
        factory=gemm_cpu.gemm,
        args=(size, size, size),
        kwargs={},
        configs=gemm_cpu.configs(size, size, size),
        compile_args=gemm_cpu.matmul.compile_args,
        profile_args=ProfileArgs(warmup_iters=warmup, rep_iters=rep, skip_check=False),
        settings=Settings.from_env(),
        verbose=False,
        name="gemm",
    )
    start = time.perf_counter()
    session = defaults.session(problem)
    outcome = session.run()
    wall = time.perf_counter() - start
    trials = {config_id(t.config): t for t in outcome.trials}
    trials.setdefault(config_id(outcome.default_trial.config), outcome.default_trial)
    kernel_s = 0.0
    retime_calls = rep + 2 * min(RETIME_ROUNDS, rep)  # 2 warmup calls per round
    for t in trials.values():
        if t.ok and t.latency is not None:
            retimed = any("re-timed" in n for n in t.notes)
            calls = warmup + rep + 1 + (retime_calls if retimed else 0)
            kernel_s += t.latency.mean_ms / 1e3 * calls
    in_worker = sum(t.compile_s or 0.0 for t in trials.values()) / session.workers + sum(
        t.run_s or 0.0 for t in trials.values()
    )
    return {
        "wall": wall,
        "kernel_s": kernel_s,
        "in_worker_floor": in_worker,
        "workers": session.workers,
        "compile_wall": session.compile_wall_s,
        "configs": len(outcome.trials),
        "passed": sum(t.ok for t in outcome.trials),
        "best_ms": outcome.latency,
        "load": os.getloadavg()[0],
    }


def _retune(size: int, warmup: int, rep: int, ref: bool, cache: Path) -> dict:
    """One tuning through the public API with ``cache`` as the cache (in this process)."""
    import torch

    import tileauto

    os.environ.pop("TILEAUTO_DISABLE_CACHE", None)
    os.environ.pop("TILEAUTO_AUTO_TUNING_DISABLE_CACHE", None)
    os.environ["TILEAUTO_CACHE_DIR"] = str(cache)
    if os.environ.get("RECHECK_CACHES_OFF"):
        os.environ["TILEAUTO_DISABLE_CACHE"] = "1"
    kernels = cache / "kernels"

    def entries() -> int:
        return len(list(kernels.iterdir())) if kernels.is_dir() else 0

    tuner = tileauto.AutoTuner.from_kernel(gemm_cpu.gemm, gemm_cpu.configs(size, size, size))
    tuner.args = (size, size, size)
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    tuner.set_profile_args(
        warmup_iters=warmup, rep_iters=rep, ref_prog=torch.matmul if ref else None
    )
    before, start = entries(), time.perf_counter()
    result = tuner.run(verbose=False)
    wall = time.perf_counter() - start
    taken = [any("earlier tuning" in n for n in t.notes) for t in result.trials]
    borrowed = sum(taken)
    # compiled here: a compile time and not taken from the earlier tuning (a kernel cache
    # hit has none); the kernel entries it added say the same when the caches are on
    compiled = sum((t.compile_s or 0.0) > 0 and not b for t, b in zip(result.trials, taken))
    return {
        "wall": wall,
        "compiled": compiled,
        "stored": entries() - before,
        "borrowed": borrowed,
        "configs": len(result.trials),
        "best_ms": result.latency,
        "load": os.getloadavg()[0],
    }


def recheck(size: int, warmup: int, rep: int, rounds: int) -> list[str]:
    """The re-tuning under other checks or timing against a cold tuning (see the docstring)."""
    import shutil

    runs: dict[str, list[dict]] = {}

    def child(label: str, cache: Path, ref: bool, rep_n: int, off: bool = False) -> None:
        env = {**os.environ, "RECHECK_CACHES_OFF": "1" if off else ""}
        args = ["--size", str(size), "--warmup", str(warmup), "--rep", str(rep_n)]
        out = subprocess.run(
            [sys.executable, __file__, "--recheck-json", str(cache), str(int(ref)), *args],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        runs.setdefault(label, []).append(json.loads(out.stdout.strip().splitlines()[-1]))

    for r in range(rounds):
        cache = Path(tempfile.mkdtemp(prefix="tileauto-recheck-"))
        try:
            child("cold, with ref_prog", cache, True, rep)
            later = [  # (label, ref_prog, rep, caches off)
                ("again without ref_prog", False, rep, False),
                ("again, rep doubled", True, 2 * rep, False),  # the same checks, other timing
                ("without ref_prog, caches off (before)", False, rep, True),
            ]
            for label, ref, rep_n, off in later if r % 2 == 0 else later[::-1]:
                child(label, cache, ref, rep_n, off)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    cold = statistics.median(x["wall"] for x in runs["cold, with ref_prog"])
    lines = [
        f"\nre-tuning with other checks or timing: GEMM {size}^3, "
        f"{runs['cold, with ref_prog'][0]['configs']} configs, fresh processes, median of "
        f"{rounds} round(s), each with an empty cache; ratios against the cold tuning"
    ]
    for label, got in runs.items():
        wall = statistics.median(x["wall"] for x in got)
        lines.append(
            f"  {label:<40} {wall:6.2f} s  {wall / cold:5.2f} x cold  compiled "
            f"{statistics.median(x['compiled'] for x in got):4.0f}  measurements taken "
            f"{statistics.median(x['borrowed'] for x in got):4.0f}  load "
            f"{min(x['load'] for x in got):.2f}-{max(x['load'] for x in got):.2f}"
        )
    after = statistics.median(x["wall"] for x in runs["again without ref_prog"])
    before = statistics.median(x["wall"] for x in runs["without ref_prog, caches off (before)"])
    lines.append(
        f"  without ref_prog after a tuning with one: {after:.2f} s now against {before:.2f} s "
        f"before issue 38 ({before / after:.1f}x faster; {after / cold:.2f} of a cold tuning)"
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--rep", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved 1- and 2-worker rounds")
    parser.add_argument(
        "--recheck-rounds", type=int, default=1, help="re-tuning rounds (0: skip them)"
    )
    parser.add_argument("--only-recheck", action="store_true", help="the re-tuning alone")
    parser.add_argument("--recheck-json", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--cold-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--import-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = ["--size", str(args.size), "--warmup", str(args.warmup), "--rep", str(args.rep)]
    if args.recheck_json:  # one tuning with a cache, in this fresh process (see recheck)
        cache, ref = args.recheck_json
        print(json.dumps(_retune(args.size, args.warmup, args.rep, ref == "1", Path(cache))))
        return 0
    if args.only_recheck:
        print("\n".join(recheck(args.size, args.warmup, args.rep, max(1, args.recheck_rounds))))
        return 0
    if args.cold_json:  # one cold tuning in this fresh process, as JSON (see below)
        print(json.dumps(tune_once(args.size, 2, args.warmup, args.rep)))
        return 0
    if args.import_json:  # TVM's import as a cold tuning pays it, in this fresh process
        start = time.perf_counter()
        import tileauto.jit.target  # noqa: F401 - imports TVM

        print(json.dumps({"import_s": time.perf_counter() - start}))
        return 0
    load_start = os.getloadavg()[0]
    cold = tune_once(args.size, 2, args.warmup, args.rep)
    served = subprocess.run(
        [sys.executable, __file__, "--cold-json", *sizes],
        env={**os.environ, "TILEAUTO_WORKER_START": "forkserver"},
        capture_output=True,
        text=True,
        check=True,
    )
    cold_served = json.loads(served.stdout.strip().splitlines()[-1])
    imports = [
        json.loads(
            subprocess.run(
                [sys.executable, __file__, "--import-json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()[-1]
        )["import_s"]
        for _ in range(3)
    ]
    import_s = statistics.median(imports)  # a cold process cannot compile without it
    cold["import_s"] = cold_served["import_s"] = import_s
    phases: dict[int, list[dict]] = {1: [], 2: []}
    tunings: dict[int, list[dict]] = {1: [], 2: []}
    spin_n = calibrate_spin()
    spins: dict[int, list[float]] = {1: [], 2: []}
    for r in range(args.rounds):  # interleaved, the order alternating, so load hits both alike
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            phases[workers].append(compile_phase(args.size, workers))
            spins[workers].append(spin_phase(spin_n, workers))
    for workers in (2, 1):
        tunings[workers].append(tune_once(args.size, workers, args.warmup, args.rep))
    # the floor's compile part: every compile alone, one worker (median over the rounds)
    alone = [statistics.median(p["per_config"][i] for p in phases[1]) for i in range(17)]
    alone_s = sum(alone)

    # what `workers` processes get done on this machine now, in units of one process: 2 on 2
    # idle cores, less while other processes want them (a fact of life, not tileauto's doing)
    machine = [2 * a / b for a, b in zip(spins[1], spins[2])]
    capacity = {1: 1.0, 2: min(2.0, statistics.median(machine))}

    def floor(r: dict) -> float:
        w = r["workers"]  # the best split of the compiles, on the share of the cores they get
        compiles = makespan(alone, w) * w / capacity[w]
        return r.get("import_s", 0.0) + compiles + r["kernel_s"]

    rows = [
        ("2 workers, cold process", cold),
        ("  the same, forkserver", cold_served),
        ("2 workers, warm process", tunings[2][0]),
        ("1 worker, warm process", tunings[1][0]),
    ]
    print(
        f"\ntune time: GEMM {args.size}^3, {cold['configs']} configs, warmup {args.warmup}, "
        f"rep {args.rep}; load average {load_start:.2f} at the start"
    )
    header = (
        f"{'run':<26} {'wall s':>7} {'floor s':>8} {'wall/floor':>10} {'in-worker floor':>16} "
        f"{'compile phase s':>16} {'best ms':>8} {'load':>5}"
    )
    print(header)
    print("-" * len(header))
    for label, r in rows:
        print(
            f"{label:<26} {r['wall']:7.2f} {floor(r):8.2f} {r['wall'] / floor(r):10.2f} "
            f"{r['in_worker_floor']:16.2f} {r['compile_wall']:16.2f} {r['best_ms']:8.4f} "
            f"{r['load']:5.2f}"
        )
    print(
        f"floor = {alone_s:.2f} s of compiles timed alone (1 worker), split between the workers "
        f"as evenly as whole compiles allow ({makespan(alone, 2):.2f} s the longer half for 2), "
        f"at what they get done at once ({capacity[2]:.2f} for 2: the machine's own speedup "
        f"below) + the kernels' own "
        f"time (mean call) x the calls the tuner makes; in-worker floor: the run's own compile "
        f"and run seconds (the old floor); a cold process's floor adds TVM's import, "
        f"{import_s:.2f} s (median of {len(imports)} fresh processes: "
        f"{', '.join(f'{x:.2f}' for x in imports)}), which no tuner that compiles avoids"
    )
    ratios = [a["wall"] / b["wall"] for a, b in zip(phases[1], phases[2])]
    speedup = statistics.median(ratios)
    cpu1 = statistics.median(p["cpu"] for p in phases[1]) / 17
    cpu2 = statistics.median(p["cpu"] for p in phases[2]) / 17
    loads = [p["load"] for ps in phases.values() for p in ps]
    print(
        f"\ncompile phase, 1 worker / 2 workers: "
        f"{statistics.median(p['wall'] for p in phases[1]):.2f} s / "
        f"{statistics.median(p['wall'] for p in phases[2]):.2f} s = {speedup:.2f}x "
        f"(median of {args.rounds} interleaved rounds: {', '.join(f'{x:.2f}' for x in ratios)}; "
        f"target >= {COMPILE_TARGET}: {'met' if speedup >= COMPILE_TARGET else 'MISSED'}; "
        f"load {min(loads):.2f}-{max(loads):.2f})"
    )
    efficiency = statistics.median(x / m for x, m in zip(ratios, machine))
    print(
        f"the machine's own speedup, the same work in 2 processes vs 1, in the same rounds: "
        f"{statistics.median(machine):.2f}x ({', '.join(f'{x:.2f}' for x in machine)}; 2.00 on "
        f"2 idle cores); compile speedup / it: {efficiency:.2f} (parallel efficiency, target "
        f">= {EFFICIENCY_TARGET:.2f}, the {COMPILE_TARGET}x of 2 idle cores: "
        f"{'met' if efficiency >= EFFICIENCY_TARGET else 'MISSED'})"
    )
    print(
        f"CPU seconds per compile: 1 worker {cpu1:.3f}, 2 workers {cpu2:.3f} "
        f"({cpu2 / cpu1:.2f}x: what two compiles cost each other beyond sharing the cores)"
    )
    w1, w2 = tunings[1][0], tunings[2][0]
    print(
        f"whole tuning, 1 worker / 2 workers (warm): {w1['wall']:.2f} s / {w2['wall']:.2f} s = "
        f"{w1['wall'] / w2['wall']:.2f}x"
    )
    print(
        f"cold process, forkserver / forked workers: {cold_served['wall']:.2f} s / {cold['wall']:.2f} s = "
        f"{cold_served['wall'] / cold['wall']:.2f}x (wall / floor {cold_served['wall'] / floor(cold_served):.2f} with the forkserver)"
    )
    print(
        f"cold process, TVM's import left out of its floor: wall / floor "
        f"{cold['wall'] / (floor(cold) - import_s):.2f} (a fixed cost: the more the kernels "
        f"take, the less it weighs)"
    )
    wf_cold, wf_warm = cold["wall"] / floor(cold), w2["wall"] / floor(w2)
    print(
        f"wall / floor: cold {wf_cold:.2f}, warm {wf_warm:.2f} (target <= {FLOOR_TARGET}: "
        f"{'met' if max(wf_cold, wf_warm) <= FLOOR_TARGET else 'MISSED'})"
    )
    if args.recheck_rounds > 0:
        print("\n".join(recheck(args.size, args.warmup, args.rep, args.recheck_rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
