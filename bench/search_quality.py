"""How well each search strategy finds the optimum of real recorded spaces, with few trials.

    python bench/search_quality.py [--quick] [--seeds 10] [--budgets 1,2,5]
                                   [--strategies guided,random,tpe] [--plot docs/img/search_quality.png]
                                   [--json out.json] [--space-scale]

Replays each strategy on each recorded space of ``../shared/data/tuning-spaces/`` (Kernel Tuner
cache files: every valid config of a GPU kernel, measured) through ``tileauto.search.replay``,
the tuner's own search loop with a lookup instead of compile and run. A failed config costs a
trial. For each space, budget (a share of the space) and strategy, over the seeds:

- the score (optimum / best found, 1.0 = the optimum): median, 10th percentile and mean;
- hit: the share of seeds that came within 5% of the optimum;
- the trials it took to come within 5% (median over the seeds; ">N" when most never did);
- the proposal time: milliseconds of ``ask()`` per proposed config (timed here, around the
  strategy, never inside it), at 8 configs per batch.

Strategies: ``guided`` (tileauto's ``GuidedSearch``), ``random`` (``RandomSearch``), ``tpe``
(Optuna's ``TPESampler`` alone, ``OptunaSearch``: see its docstring for how proposals outside
the space are handled). One replay per seed runs to the largest budget; the smaller budgets
read the best-so-far trace at their trial count, which is what a replay with that budget
returns, because no strategy here reads its budget (a unit test checks this for guided).

``--quick``: 5 seeds, budgets 1% and 2% (about a minute on 2 shared cores). The full run (20
seeds, 1/2/5%) takes about 24 minutes, 20 of them TPE on the GEMM space, whose proposal cost
grows with the number of trials Optuna has seen.
``--space-scale``: also time the start-up and memory of a product space of 10^6 configs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tileauto.search import (  # noqa: E402
    GuidedSearch,
    OptunaSearch,
    RandomSearch,
    RecordedSpace,
    SearchStrategy,
    replay,
)

SPACES = ROOT.parent / "shared" / "data" / "tuning-spaces"
STRATEGIES = {
    "guided": lambda: GuidedSearch(),
    "random": lambda: RandomSearch(),
    "tpe": lambda: OptunaSearch("tpe"),
}
PARALLELISM = 8


class Timed(SearchStrategy):
    """A strategy with its ``ask()`` timed from outside (strategies never time themselves)."""

    def __init__(self, inner: SearchStrategy) -> None:
        self.inner = inner
        self.ask_s = 0.0
        self.asks = 0
        self.proposed = 0

    def start(self, space, *, parallelism=1, seed=0):  # type: ignore[no-untyped-def]
        self.inner.start(space, parallelism=parallelism, seed=seed)

    def ask(self) -> list[int]:
        start = time.perf_counter()
        picks = self.inner.ask()
        self.ask_s += time.perf_counter() - start
        self.asks += 1
        self.proposed += len(picks)
        return picks

    def tell(self, index, trial):  # type: ignore[no-untyped-def]
        self.inner.tell(index, trial)

    def describe(self) -> str:
        return self.inner.describe()


def run_one(record: RecordedSpace, name: str, budget: int, seed: int) -> dict[str, Any]:
    timed = Timed(STRATEGIES[name]())
    result = replay(record, timed, budget=budget, seed=seed, parallelism=PARALLELISM)
    trace = list(result.trace) + [result.trace[-1]] * (budget - len(result.trace))
    optimum = result.optimum_ms
    return {
        "trace": [optimum / b if math.isfinite(b) else 0.0 for b in trace],
        "reach": result.trials_to_reach(0.05),
        "ms_per_config": 1e3 * timed.ask_s / max(timed.proposed, 1),
    }


def summarize(runs: list[dict[str, Any]], budgets: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for b in budgets:
        scores = sorted(r["trace"][b - 1] for r in runs)
        out[b] = {
            "median": statistics.median(scores),
            "p10": _quantile(scores, 0.10),
            "mean": statistics.fmean(scores),
            "hit": sum(s >= 1 / 1.05 for s in scores) / len(scores),
        }
    reach = sorted(r["reach"] if r["reach"] is not None else math.inf for r in runs)
    out["reach"] = statistics.median(reach)
    out["ms_per_config"] = statistics.fmean(r["ms_per_config"] for r in runs)
    return out


def _quantile(sorted_values: list[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def space_scale() -> None:
    """Start-up time and memory of a 10^6-config product, unconstrained and constrained."""
    from tileauto.space import product

    values = {name: list(range(10)) for name in "abcdef"}
    for label, rules in (
        ("no constraint", []),
        ("3 expressions", ["a % 2 == 0", "b + c < 12", "d != e or f == 0"]),
        ("1 callable", [lambda c: c["a"] % 2 == 0]),
    ):
        start = time.perf_counter()
        space = product(**values, constraints=rules)
        n = len(space)
        space.config(n // 2)
        took = time.perf_counter() - start
        tracemalloc.start()  # again, apart: tracing slows every allocation down
        again = product(**values, constraints=rules)
        len(again)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        kept = getattr(again, "_valid", None)
        print(
            f"product of 10^6, {label:13s}: {n:>9,} configs, len + one config in "
            f"{took * 1e3:8.1f} ms, peak {peak / 2**20:5.1f} MiB, kept "
            f"{(kept.nbytes if kept is not None else 0) / 2**20:4.1f} MiB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--budgets", default=None, help="percentages, e.g. 1,2,5")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--spaces", default=str(SPACES))
    parser.add_argument("--plot", default=None, help="draw best-so-far per strategy into IMG")
    parser.add_argument("--json", default=None, help="write every number to FILE")
    parser.add_argument("--space-scale", action="store_true")
    args = parser.parse_args()
    seeds = args.seeds or (5 if args.quick else 10)
    shares = [
        float(x) / 100 for x in (args.budgets or ("1,2" if args.quick else "1,2,5")).split(",")
    ]
    names = [s for s in args.strategies.split(",") if s]
    files = sorted(Path(args.spaces).glob("*.json*"))
    if not files:
        sys.exit(f"no recorded spaces in {args.spaces}")
    print(
        f"{time.strftime('%Y-%m-%d')}: {seeds} seeds, budgets {[f'{s:.0%}' for s in shares]}, "
        f"{PARALLELISM} configs per batch\n"
    )
    if args.space_scale:
        space_scale()
        print()
    everything: dict[str, Any] = {}
    curves: dict[str, dict[str, list[list[float]]]] = {}
    for path in files:
        record = RecordedSpace.load(path)
        budgets = [max(1, math.ceil(s * len(record) - 1e-9)) for s in shares]
        print(f"## {path.name.split('.')[0]}: {record.describe()}")
        rows = {}
        for name in names:
            start = time.perf_counter()
            runs = [run_one(record, name, budgets[-1], seed) for seed in range(seeds)]
            rows[name] = summarize(runs, budgets)
            rows[name]["wall_s"] = time.perf_counter() - start
            curves.setdefault(path.name.split(".")[0], {})[name] = [r["trace"] for r in runs]
        _print_space(rows, names, budgets, shares)
        everything[path.name] = {"configs": len(record), "budgets": budgets, "rows": rows}
    _print_summary(everything, names, shares)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1, default=str))
    if args.plot:
        _plot(curves, args.plot)


def _print_space(
    rows: dict[str, Any], names: list[str], budgets: list[int], shares: list[float]
) -> None:
    print(f"| budget | {' | '.join(f'{n}: median / p10 / mean / hit' for n in names)} |")
    print(f"| --- | {' | '.join('---' for _ in names)} |")
    for b, s in zip(budgets, shares):
        cells = [
            f"{rows[n][b]['median']:.3f} / {rows[n][b]['p10']:.3f} / {rows[n][b]['mean']:.3f} / "
            f"{rows[n][b]['hit']:.0%}"
            for n in names
        ]
        print(f"| {s:.0%} ({b}) | {' | '.join(cells)} |")
    reach = [
        f"{rows[n]['reach']:.0f}" if math.isfinite(rows[n]["reach"]) else f">{budgets[-1]}"
        for n in names
    ]
    print(f"| trials to 5% (median) | {' | '.join(reach)} |")
    ask = [f"{rows[n]['ms_per_config']:.2f}" for n in names]
    wall = [f"{rows[n]['wall_s']:.0f}" for n in names]
    print(f"| ask, ms per config | {' | '.join(ask)} |")
    print(f"| wall, s | {' | '.join(wall)} |\n")


def _print_summary(everything: dict[str, Any], names: list[str], shares: list[float]) -> None:
    print("## Mean score over the spaces")
    print(f"| budget | {' | '.join(names)} |")
    print(f"| --- | {' | '.join('---' for _ in names)} |")
    for k, s in enumerate(shares):
        means = [
            statistics.fmean(v["rows"][n][v["budgets"][k]]["mean"] for v in everything.values())
            for n in names
        ]
        print(f"| {s:.0%} | {' | '.join(f'{m:.3f}' for m in means)} |")


def _plot(curves: dict[str, dict[str, list[list[float]]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.6), squeeze=False)
    for ax, (space, by_name) in zip(axes[0], curves.items()):
        for name, traces in by_name.items():
            n = len(traces[0])
            xs = list(range(1, n + 1))
            median = [statistics.median(t[i] for t in traces) for i in range(n)]
            low = [_quantile(sorted(t[i] for t in traces), 0.10) for i in range(n)]
            ax.plot(xs, median, label=name)
            ax.fill_between(xs, low, median, alpha=0.15)
        ax.set_title(space, fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylim(0.5, 1.01)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("optimum / best so far")
    fig.suptitle("median over seeds; shaded: down to the 10th percentile", fontsize=9)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
