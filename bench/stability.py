"""Does tuning the same space three times in a row pick the same winner? The real GEMM space.

    python bench/stability.py [--sizes 512 1024] [--runs 3] [--warmup 25] [--rep 100]
                              [--json PATH] [--quick]

Tunes the CPU GEMM space of ``examples/gemm_cpu.py`` (about 16 configs) ``--runs`` times in a
row in one process, with the tuning cache off (``TILEAUTO_AUTO_TUNING_DISABLE_CACHE=1``) so
that every run compiles and measures every config again, with tileauto's default timing
(``warmup=25, rep=100``, the native timer when it is built). For each size it prints each
run's winner with its median and p20-p80 spread, the configs that came close, and the verdict:

- ``same winner``: every run picked the same config;
- ``within 5%``: the runs picked different configs, and timed head to head afterwards (the
  distinct winners compiled again and timed in ``--h2h-rounds`` interleaved rounds, the order
  alternating, each round's ratio of their medians) the slower winner's median ratio to the
  faster is at most 1.05: any of them is a right answer;
- ``UNSTABLE``: the head-to-head gap is larger than 5%: some run picked a config that is
  measurably slower. The tolerance is fixed: unlike "p20-p80 intervals overlap", which gets
  easier the noisier the machine, a noisy machine cannot make it pass (interleaved rounds put
  a slow spell on both sides of a ratio).

It also prints the load average around each run (other jobs on the machine are the main
source of noise) and which configs would have won had the same samples been ranked by their
p20 or their minimum instead of their median.

Then (``--no-experiment`` skips it) an experiment on the cause: the same compiled configs are
timed in this process with the same native timer, ``--runs`` times each way, alternating:

- ``blocks``: as the tuner does, each config's warm-up and repetitions in one contiguous block;
- ``interleaved``: the repetitions split into ``--slices`` rounds that visit every config in
  turn, so that a slow spell of the machine (another job on a core) hits every config alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
os.environ["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
os.environ["TILEAUTO_DISABLE_CACHE"] = "1"

import gemm_cpu  # noqa: E402

import tileauto  # noqa: E402
from tileauto._native import native_available, time_function  # noqa: E402
from tileauto.space import config_id  # noqa: E402

_SHORT = {"block_M": "bM", "block_N": "bN", "block_K": "bK", "micro_M": "uM", "micro_N": "uN"}


def label(config: dict) -> str:
    return " ".join(f"{_SHORT.get(k, k)}={v}" for k, v in sorted(config.items()))


def tune_once(size: int, warmup: int, rep: int) -> dict:
    tuned = tileauto.autotune(
        configs=gemm_cpu.configs, warmup_iters=warmup, rep_iters=rep, verbose=False
    )(gemm_cpu.matmul)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    tuned(size, size, size)
    seconds = time.perf_counter() - start
    load_after = os.getloadavg()[0]
    result = tuned.get_tuner_result(size, size, size)
    trials = {}
    for t in result.trials:
        if t.ok and t.latency is not None:
            trials[config_id(t.config)] = {
                "config": t.config,
                "median_ms": t.latency.median_ms,
                "p20_ms": t.latency.p20_ms,
                "p80_ms": t.latency.p80_ms,
                "min_ms": t.latency.min_ms,
                "samples": t.latency.samples,
            }
    return {
        "winner": config_id(result.config),
        "config": result.config,
        "latency_ms": result.latency,
        "seconds": seconds,
        "load": (load_before, load_after),
        "trials": trials,
        "failed": sum(not t.ok for t in result.trials),
    }


def _overlap(a: dict, b: dict) -> bool:
    return a["p20_ms"] <= b["p80_ms"] and b["p20_ms"] <= a["p80_ms"]


GAP_TOLERANCE = 0.05


def head_to_head(size: int, configs: list[dict], rounds: int, calls: int) -> float:
    """Largest gap (slower / faster - 1) between ``configs``, timed interleaved in this process."""
    import torch

    funcs = [gemm_cpu.matmul(size, size, size, **c).get_function() for c in configs]
    torch.manual_seed(0)
    args = [torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)]
    per_round: list[list[float]] = [[] for _ in funcs]
    for r in range(rounds):
        order = list(range(len(funcs)))
        order = order[r % len(order) :] + order[: r % len(order)]
        for i in order:
            funcs[i](*args)  # one untimed call: this side's caches and pool are warm
            per_round[i].append(statistics.median(time_function(funcs[i], args, calls)))
    medians = [
        statistics.median(x / y for x, y in zip(per_round[i], per_round[0]))
        for i in range(len(funcs))
    ]
    return max(medians) / min(medians) - 1.0


def verdict(runs: list[dict], h2h: Callable[[list[dict]], float] | None = None) -> dict:
    """Same winner, winners within 5% head to head, or unstable (with the evidence)."""
    winners = list(dict.fromkeys(r["winner"] for r in runs))
    if len(winners) == 1:
        return {"verdict": "same winner", "winners": winners, "worst_gap": 0.0}
    if h2h is not None:
        configs = [next(r["config"] for r in runs if r["winner"] == w) for w in winners]
        gap = h2h(configs)
        return {
            "verdict": f"within {GAP_TOLERANCE:.0%}" if gap <= GAP_TOLERANCE else "UNSTABLE",
            "winners": winners,
            "worst_gap": gap,
            "head_to_head": True,
        }
    overlaps = True
    worst_gap = 0.0  # largest (median of another winner - median of this run's winner) / median
    for run in runs:
        best = run["trials"][run["winner"]]
        for other in winners:
            stats = run["trials"].get(other)
            if stats is None:  # that config failed in this run: cannot be compared
                overlaps = False
                continue
            overlaps &= _overlap(best, stats)
            worst_gap = max(worst_gap, stats["median_ms"] / best["median_ms"] - 1.0)
    return {
        "verdict": "within spread" if overlaps else "UNSTABLE",
        "winners": winners,
        "worst_gap": worst_gap,
    }


def alternatives(runs: list[dict]) -> dict[str, list[str]]:
    """Each run's winner had tileauto ranked by another statistic (the same measurements)."""
    ids = set.intersection(*(set(r["trials"]) for r in runs))
    return {
        stat: [min(ids, key=lambda c, r=r: r["trials"][c][stat]) for r in runs]
        for stat in ("median_ms", "p20_ms", "min_ms")
    }


def report(size: int, runs: list[dict], result: dict) -> None:
    print(f"\nGEMM {size}^3: {len(runs[0]['trials'])} configs timed per run")
    for i, run in enumerate(runs):
        w = run["trials"][run["winner"]]
        print(
            f"  run {i + 1}: {run['seconds']:5.1f} s, load {run['load'][0]:.1f}-{run['load'][1]:.1f}, "
            f"winner {label(run['config'])}: "
            f"median {w['median_ms']:.4f} ms, p20-p80 {w['p20_ms']:.4f}-{w['p80_ms']:.4f} ms "
            f"({w['samples']} samples)"
        )
    # the configs that came closest: by mean rank over the runs
    ids = set.intersection(*(set(r["trials"]) for r in runs))
    ranks = {cid: [] for cid in ids}
    for run in runs:
        order = sorted(ids, key=lambda c: run["trials"][c]["median_ms"])
        for rank, cid in enumerate(order, 1):
            ranks[cid].append(rank)
    top = sorted(ids, key=lambda c: statistics.fmean(ranks[c]))[:5]
    print("  closest configs, median ms (p20-p80) per run:")
    for cid in top:
        cells = "  ".join(
            f"{r['trials'][cid]['median_ms']:.4f} ({r['trials'][cid]['p20_ms']:.4f}-"
            f"{r['trials'][cid]['p80_ms']:.4f})"
            for r in runs
        )
        print(f"    ranks {ranks[cid]} {label(runs[0]['trials'][cid]['config'])}: {cells}")
    for stat, winners in result["by_statistic"].items():
        same = len(set(winners)) == 1
        print(
            f"  ranked by {stat[:-3]:<6}: {'same winner' if same else 'winners differ'} "
            f"({'; '.join(label(runs[0]['trials'][w]['config']) for w in dict.fromkeys(winners))})"
        )
    medians = [r["trials"][r["winner"]]["median_ms"] for r in runs]
    spread = (max(medians) - min(medians)) / min(medians)
    print(
        f"  verdict: {result['verdict']} ({len(result['winners'])} distinct winner(s); "
        + (
            f"head-to-head gap between the winners {result['worst_gap'] * 100:.1f}%; "
            if result.get("head_to_head")
            else ""
        )
        + f"winner's median varies {spread * 100:.1f}% across runs)"
    )


def _timing_stats(samples_ns: list[int]) -> dict:
    ms = sorted(s / 1e6 for s in samples_ns)

    def q(f: float) -> float:
        return ms[min(len(ms) - 1, round(f * (len(ms) - 1)))]

    return {"median_ms": statistics.median(ms), "p20_ms": q(0.2), "p80_ms": q(0.8), "min_ms": ms[0]}


def experiment(size: int, runs: int, warmup: int, rep: int, slices: int) -> dict:
    """The same kernels timed in contiguous blocks and in interleaved slices, alternately."""
    import torch

    space = gemm_cpu.configs(size, size, size)
    kernels = gemm_cpu.matmul.par_compile([{"M": size, "N": size, "K": size, **c} for c in space])
    compiled = [
        (config_id(cfg), cfg, kernel.get_function())
        for cfg, kernel in zip(space, kernels)
        if kernel  # a CompileFailure is falsy
    ]
    torch.manual_seed(0)
    a, b = torch.randn(size, size), torch.randn(size, size)
    c = torch.empty(size, size)
    args = [a, b, c]

    def blocks() -> dict:
        out = {}
        for cid, cfg, func in compiled:
            for _ in range(warmup):
                func(*args)
            out[cid] = {"config": cfg, **_timing_stats(time_function(func, args, rep))}
        return out

    def interleaved() -> dict:
        samples: dict[str, list[int]] = {cid: [] for cid, _, _ in compiled}
        per_slice = max(1, rep // slices)
        warm = max(1, warmup // slices)
        for s in range(slices):
            order = compiled[s % len(compiled) :] + compiled[: s % len(compiled)]
            for cid, _, func in order:
                for _ in range(warm):
                    func(*args)
                samples[cid].extend(time_function(func, args, per_slice))
        return {cid: {"config": cfg, **_timing_stats(samples[cid])} for cid, cfg, _ in compiled}

    results: dict[str, list[dict]] = {"blocks": [], "interleaved": []}
    for _ in range(runs):
        for name, fn in (("blocks", blocks), ("interleaved", interleaved)):
            trials = fn()
            winner = min(trials, key=lambda c, t=trials: t[c]["median_ms"])
            results[name].append(
                {"winner": winner, "config": trials[winner]["config"], "trials": trials}
            )
    out = {}
    print(
        f"  experiment, GEMM {size}^3, the same kernels timed {runs} times each way, alternately:"
    )
    for name, rs in results.items():
        v = verdict(rs)
        out[name] = {**v, "runs": rs}
        winners = "; ".join(
            f"{label(r['config'])} {r['trials'][r['winner']]['median_ms']:.4f} ms" for r in rs
        )
        print(
            f"    {name:<11}: {v['verdict']} ({len(v['winners'])} distinct winner(s), largest gap "
            f"{v['worst_gap'] * 100:.1f}%): {winners}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[512, 1024], help="M = N = K")
    parser.add_argument("--runs", type=int, default=3, help="tunings in a row per size")
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--rep", type=int, default=100)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="one small size (a smoke run)")
    parser.add_argument("--slices", type=int, default=10, help="rounds of the interleaved timing")
    parser.add_argument("--h2h-rounds", type=int, default=20, help="head-to-head rounds")
    parser.add_argument(
        "--no-experiment", action="store_true", help="skip the blocks vs interleaved experiment"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = [256]
    print(
        f"\ntuning stability: examples/gemm_cpu.py space, {args.runs} runs in a row per size, "
        f"warmup {args.warmup}, rep {args.rep}, tuning cache off, native timer "
        f"{'on' if native_available() else 'off (Python loop)'}, "
        f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')} (as a user runs it)"
    )
    out = {}
    for size in args.sizes:
        runs = [tune_once(size, args.warmup, args.rep) for _ in range(args.runs)]
        result = verdict(
            runs, lambda cfgs, size=size: head_to_head(size, cfgs, args.h2h_rounds, 10)
        )
        result["by_statistic"] = alternatives(runs)
        report(size, runs, result)
        out[str(size)] = {**result, "runs": runs}
        if not args.no_experiment:
            out[str(size)]["experiment"] = experiment(
                size, args.runs, args.warmup, args.rep, args.slices
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": args.runs, "sizes": out}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
