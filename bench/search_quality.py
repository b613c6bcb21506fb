"""How well each search strategy finds the optimum of recorded spaces it was never tuned on.

    nice -n 5 python bench/search_quality.py [--quick] [--seeds 20] [--budgets 1,2,5]
        [--strategies guided,guided+prior,guided+prior-flat,guided+prior-turns,guided+prior-mean,guided+misfit,guided+unlike,
                      guided+device,guided-stay,tpe,genetic,pso,random]
        [--jobs 2] [--tpe-seeds 5] [--only gemm,pnpoly] [--holdout bench/spaces]
        [--prior-extra DIR [--prior-extra DIR2 ...]]
        [--plot docs/img/search_quality.png]
        [--json out.json] [--log replays.jsonl] [--no-scale]

Replays each strategy on each recorded space of ``../shared/data/tuning-spaces/`` (Kernel Tuner
cache files: every valid config of a GPU kernel, measured; four kernels, each on two to four
devices) through ``tileauto.search.replay``, the tuner's own search loop with a lookup instead
of compile and run. A failed config costs a trial. The score of a replay is optimum / best
found (1.0: the optimum); a space's figure is the median over the seeds.

Everything is reported held out:

- **Leave one kernel out.** The guided search's settings are chosen among ``CANDIDATES`` on
  the spaces of the other kernels (the best mean of per-space medians over the budgets up to
  2%, unless its lead over the default is within one standard error: then the default;
  ``--select best`` drops that rule) and scored on the left-out kernel's spaces, for each of
  the five kernels (two convolution codes, dedispersion, GEMM, pnpoly); every figure of
  ``guided`` is such a held-out score, and the bench prints which candidate each split chose
  and every candidate's training and left-out means. ``guided+prior`` and ``guided+misfit``
  run the default settings. The other strategies have no settings to choose (their
  libraries' or Kernel Tuner's defaults).
- **Leave one device out (transfer).** ``guided+prior`` scores a space with the records of the
  same kernel on the *other* devices as its prior (``replay(..., prior=[...])``), never the
  space's own record; records of the same file name (the same problem elsewhere, as in
  ``--prior-extra``) are grouped as ``SameProblem``, as a tuning's cache prior groups the
  same call's entries, and ``guided+prior-flat`` gives the same records without the group.
- **Spaces recorded after the design** (``--holdout DIR``): the guided search's settings are
  chosen once, on every space of ``--spaces``, by the same rule, and every strategy is scored
  on the spaces of ``DIR`` (``bench/record_cpu_spaces.py`` records the CPU GEMM's); priors and
  misfits come from ``DIR``'s own files, and from those of each ``--prior-extra DIR2`` (records
  of the same kernels on other devices, never scored; a file of the same name there is
  another record).
- **A prior that does not fit.** ``guided+misfit`` gives each space the records of another
  kernel whose parameters share names with it (the convolutions: other parameters and
  values), or, for kernels with no such neighbour, the same kernel's records on another device
  with their times shuffled (an unlike device); it must stay within 0.02 of ``guided``.
  That shuffle is one draw, the same for every seed, so its first picks are the same few
  configs in every replay; ``guided+unlike`` shuffles the same kernel's record on another
  device again for each seed (a different unlike device per seed), which averages over them.
- **The same problem on other devices only** (``guided+device``, with ``--prior-extra``): the
  prior is the records of the same file name in the ``--prior-extra`` folders, the same kernel
  and problem measured on other devices and nothing else: what a real tuning's cache prior
  finds (``with_cache_prior``: the same factory and problem, other targets). Run by default
  only where ``--prior-extra`` is given.

Strategies: ``guided`` (tileauto's ``GuidedSearch``, no prior), ``guided+prior``,
``guided+prior-flat``, ``guided+prior-turns`` (the same prior, its first batch filled by the records taking turns:
``GuidedSearch(prior_order="turns")``), ``guided+prior-mean`` (the same prior, its first batch
in the records' order without keeping its configs apart: ``prior_order="mean"``, the default
before the tenth test), ``guided+misfit``, ``guided+unlike``, ``guided-stay`` (no prior, the
step-out rule before the thirteenth test: ``GuidedSearch(step_out="stay")``), ``tpe`` (Optuna's ``TPESampler(multivariate=True, constant_liar=True)``
driven through ``OptunaSearch``), ``genetic`` and ``pso`` (Kernel Tuner's genetic algorithm
and particle swarm with its defaults: ``tileauto.search.baselines``), ``random``. One replay
per seed runs to the largest budget; the smaller budgets read its best-so-far trace, which is
what a replay with that budget returns, since none of these strategies reads its budget.

Also measured: the proposal time (``ask()``, timed around the strategy, per proposed config:
wall time, and the CPU time of the asking thread, which holds on a shared machine) on every
space, the 17,956-config GEMM spaces among them, and on lazy products of 10^6 configs
(``--no-scale`` skips it). Runs ``--jobs`` replays at once (processes, each with its
libraries imported before it is timed); ``--quick``: 5 seeds at 1% and 2%.

Time on 2 shared cores (load average 6-13): ``--seeds 20 --budgets 1,2`` (3,080 replays: five
guided candidates, TPE on 20 seeds too) took 1,051 s. TPE is the slow one (its proposals cost
26-42 ms per config on the GEMM at 2%, growing with the trials it has seen); ``--tpe-seeds``
gives it fewer seeds where time is short. At 5% TPE takes about a minute a replay on the GEMM
spaces (898 trials), so ``--seeds 20 --tpe-seeds 20 --budgets 1,2,5`` runs for hours on one
process: ``--log FILE`` keeps every replay as it ends, and the same command with the same
``--log`` resumes a run that was stopped or killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tileauto.search import (  # noqa: E402
    GuidedSearch,
    OptunaSearch,
    RandomSearch,
    RecordedSpace,
    SameProblem,
    SearchStrategy,
    replay,
)
from tileauto.search.baselines import GeneticSearch, ParticleSwarm  # noqa: E402

SPACES = ROOT.parent / "shared" / "data" / "tuning-spaces"
PARALLELISM = 8
# the guided search's settings chosen among on the training kernels of each split; fixed
# (2026-11-26, issue 36) before any of them was scored on the recorded spaces
CANDIDATES: dict[str, dict[str, Any]] = {
    "default": {},
    "trees=10": {"trees": 10},  # half the trees: half the model's CPU time
    "wide": {"explore": 0.25, "good_fraction": 0.3},  # more random picks, a broader "good"
    "parzen=3": {"parzen": 3},  # a portfolio: 3 slots of 8 to a TPE-style density ratio
    "parzen=3,trees=10": {"parzen": 3, "trees": 10},
}
BASELINES = {
    # the guided search with the step-out rule before 2026-11-28 (docs/search.md, "A thirteenth
    # test"): not a candidate, the rule it replaced, side by side
    "guided-stay": lambda: GuidedSearch(step_out="stay"),
    "tpe": lambda: OptunaSearch("tpe", multivariate=True, constant_liar=True),
    "genetic": lambda: GeneticSearch(),
    "pso": lambda: ParticleSwarm(),
    "random": lambda: RandomSearch(),
}
ALL = [
    "guided",
    "guided+prior",
    "guided+prior-flat",
    "guided+prior-turns",
    "guided+prior-mean",
    "guided+misfit",
    "guided+unlike",
    "guided+device",
    "guided-stay",
    "tpe",
    "genetic",
    "pso",
    "random",
]


def kernel_of(name: str) -> str:
    """The kernel of a recorded space's file name (its device is the rest)."""
    parts = name.split("_")
    return "_".join(parts[:2])


class Timed(SearchStrategy):
    """A strategy with its ``ask()`` timed from outside (strategies never time themselves)."""

    def __init__(self, inner: SearchStrategy) -> None:
        self.inner = inner
        self.ask_s = 0.0  # wall seconds
        self.ask_cpu_s = 0.0  # this thread's CPU seconds: what the proposals cost, whatever
        self.proposed = 0  # else runs on the machine

    def start(self, space, *, parallelism=1, seed=0):  # type: ignore[no-untyped-def]
        self.inner.start(space, parallelism=parallelism, seed=seed)

    def ask(self) -> list[int]:
        start, cpu = time.perf_counter(), time.thread_time()
        picks = self.inner.ask()
        self.ask_s += time.perf_counter() - start
        self.ask_cpu_s += time.thread_time() - cpu
        self.proposed += len(picks)
        return picks

    def tell(self, index, trial):  # type: ignore[no-untyped-def]
        self.inner.tell(index, trial)

    def use_prior(self, source: Any) -> None:
        hand_in = getattr(self.inner, "use_prior", None)
        if callable(hand_in):
            hand_in(source)

    def use_family(self, family: str | None) -> None:
        tell = getattr(self.inner, "use_family", None)
        if callable(tell):
            tell(family)

    def describe(self) -> str:
        return self.inner.describe()


_RECORDS: dict[tuple[str, str], RecordedSpace] = {}


def _record(folder: str, name: str) -> RecordedSpace:
    if (folder, name) not in _RECORDS:
        (path,) = Path(folder).glob(f"{name}.json*")  # plain or gzipped JSON
        _RECORDS[folder, name] = RecordedSpace.load(path)
    return _RECORDS[folder, name]


def _shuffled(record: RecordedSpace, seed: int) -> RecordedSpace:
    """The record with its times dealt out again at random: a device unlike this one."""
    import random

    latencies = [t.latency_ms if t.ok else None for t in record.trials]
    random.Random(seed).shuffle(latencies)
    return RecordedSpace.from_latencies(record.space, latencies, kernel="shuffled")


Pool = list[tuple[str, str]]  # recorded spaces as (folder, name): where priors come from


def priors_of(folder: str, name: str, pool: Pool, kind: str, seed: int = 0) -> list[Any]:
    """The prior a space gets: the same kernel's other records in ``pool`` (other devices;
    ``prior``: those of the same name grouped as ``SameProblem``, ``flat``: not), or one that
    does not fit (``misfit``; ``unlike``: another device's record shuffled with ``seed``)."""
    mine = kernel_of(name)
    same = [(f, n) for f, n in pool if kernel_of(n) == mine and (f, n) != (folder, name)]
    if kind == "flat":
        return [_record(f, n) for f, n in same]
    if kind == "prior":  # as a tuning's cache prior: the same problem's records apart
        problem = [_record(f, n) for f, n in same if n == name]
        rest = [_record(f, n) for f, n in same if n != name]
        return [SameProblem(problem), *rest] if problem else rest
    if kind == "unlike":
        return [_shuffled(_record(*same[0]), seed)] if same else []
    if kind == "device":  # the same problem measured elsewhere: a file of the same name
        return [_record(f, n) for f, n in same if n == name]

    def params(f: str, n: str) -> set[str]:
        return {x for p in _record(f, n).space.params for x in p.names}

    ours = params(folder, name)
    shared = {  # other kernels by the parameter names they share: other values, other times
        (f, n): len(ours & params(f, n)) for f, n in pool if kernel_of(n) != mine
    }
    nearest = max(shared, key=lambda other: shared[other], default=None)
    if nearest is not None and shared[nearest] >= 6:
        return [_record(*nearest)]
    return [_shuffled(_record(*same[0]), 0)]


def guided(settings: dict[str, Any]) -> GuidedSearch:
    return GuidedSearch(**settings)


def run_job(job: tuple[str, str, str, int, int, Pool, str]) -> dict[str, Any]:
    """One replay: (folder, space, strategy, seed, trials, the priors' pool, candidate)."""
    folder, name, strategy, seed, budget, pool, candidate = job
    record = _record(folder, name)
    prior = None
    if strategy in BASELINES:
        inner: SearchStrategy = BASELINES[strategy]()
    elif strategy.startswith("guided"):
        settings = CANDIDATES[candidate]
        order = {"guided+prior-turns": "turns", "guided+prior-mean": "mean"}.get(strategy)
        inner = guided({**settings, "prior_order": order} if order else settings)
        if strategy != "guided":
            kind = {
                "guided+misfit": "misfit",
                "guided+unlike": "unlike",
                "guided+device": "device",
                "guided+prior-flat": "flat",
            }.get(strategy, "prior")
            prior = priors_of(folder, name, pool, kind, seed)
    timed = Timed(inner)
    start = time.perf_counter()
    result = replay(record, timed, budget=budget, seed=seed, parallelism=PARALLELISM, prior=prior)
    trace = list(result.trace) + [result.trace[-1]] * (budget - len(result.trace))
    return {
        "space": name,
        "size": len(record),
        "strategy": strategy,
        "candidate": candidate,
        "seed": seed,
        "scores": [result.optimum_ms / b if math.isfinite(b) else 0.0 for b in trace],
        "ask_s": timed.ask_s,
        "ask_cpu_s": timed.ask_cpu_s,
        "proposed": timed.proposed,
        "wall_s": time.perf_counter() - start,
    }


def _warm() -> None:
    """Import the libraries before any replay, so that no strategy's ask() pays for it."""
    import optuna  # noqa: F401
    import sklearn.ensemble  # noqa: F401


def _median_at(runs: list[dict[str, Any]], trials: int) -> float:
    return statistics.median(r["scores"][trials - 1] for r in runs)


def choose(
    by: dict[tuple[str, str, str], list[dict[str, Any]]],
    train: list[str],
    budgets: dict[str, list[int]],
    select: list[int],
    rule: str = "1se",
) -> tuple[str, dict[str, float]]:
    """The candidate the spaces ``train`` choose, and each candidate's training mean (of
    per-space medians over the budgets ``select``); under ``"margin"``, the best one's lead over
    the default and one standard error of that lead. ``rule``: see :func:`held_out`."""

    def mean(candidate: str) -> float:
        return statistics.fmean(
            _median_at(by[(n, "guided", candidate)], budgets[n][k]) for n in train for k in select
        )

    def per_seed(candidate: str) -> dict[int, float]:
        scores: dict[int, list[float]] = {}
        for n in train:
            for r in by[(n, "guided", candidate)]:
                scores.setdefault(r["seed"], []).extend(
                    r["scores"][budgets[n][k] - 1] for k in select
                )
        return {seed: statistics.fmean(v) for seed, v in scores.items()}

    trained = {c: mean(c) for c in CANDIDATES}
    best = max(CANDIDATES, key=lambda c: trained[c])
    if best == "default":
        return best, trained
    mine, base = per_seed(best), per_seed("default")
    leads = [mine[seed] - base[seed] for seed in sorted(mine.keys() & base.keys())]
    se = statistics.stdev(leads) / math.sqrt(len(leads)) if len(leads) > 1 else 0.0
    trained["margin"] = trained[best] - trained["default"]
    trained["margin_se"] = se
    if rule == "1se" and trained["margin"] <= se:
        return "default", trained
    return best, trained


def held_out(
    by: dict[tuple[str, str, str], list[dict[str, Any]]],
    names: list[str],
    budgets: dict[str, list[int]],
    select: list[int],
    rule: str = "1se",
) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """For each kernel left out: the candidate the other kernels choose; that kernel's spaces
    are scored with it. Also returns each candidate's training mean (of per-space medians over
    the budgets ``select``), and, under ``"margin"``, the best one's lead over the default and
    one standard error of that lead.

    ``rule="best"``: the best training mean (the first in ``CANDIDATES`` on a tie).
    ``rule="1se"``: the same, unless its lead over the default is within one standard error of
    the lead (the per-seed training means of the two, paired by seed): then the default, as
    the one-standard-error rule of model selection keeps the simplest model within the noise.
    """
    kernels = sorted({kernel_of(n) for n in names})
    chosen: dict[str, str] = {}
    trained: dict[str, dict[str, float]] = {}
    for left in kernels:
        train = [n for n in names if kernel_of(n) != left]
        if not train:
            chosen[left], trained[left] = "default", {}
            continue
        chosen[left], trained[left] = choose(by, train, budgets, select, rule)
    return chosen, trained


def _print_candidates(
    by: dict[tuple[str, str, str], list[dict[str, Any]]],
    names: list[str],
    budgets: dict[str, list[int]],
    shares: list[float],
    chosen: dict[str, str],
    trained: dict[str, dict[str, float]],
) -> dict[str, dict[str, list[float]]]:
    """Each candidate on each kernel: its training mean (on the other kernels) and its score
    on the kernel itself, which only the chosen one's counts as held out."""
    print("## The guided search's candidates per split: chosen on the other kernels")
    print("training mean (other kernels) -> this kernel's mean at each budget; * chosen")
    print(f"| kernel left out | {' | '.join(CANDIDATES)} |")
    print(f"| --- | {' | '.join('---' for _ in CANDIDATES)} |")
    scores: dict[str, dict[str, list[float]]] = {}
    for kernel in sorted(chosen):
        part = [n for n in names if kernel_of(n) == kernel]
        cells = []
        for c in CANDIDATES:
            mine = [
                statistics.fmean(_median_at(by[(n, "guided", c)], budgets[n][k]) for n in part)
                for k in range(len(shares))
            ]
            scores.setdefault(kernel, {})[c] = mine
            star = "*" if chosen[kernel] == c else ""
            train = trained[kernel].get(c, math.nan)
            cells.append(f"{star}{train:.3f} -> {' / '.join(f'{m:.3f}' for m in mine)}")
        print(f"| {kernel} | {' | '.join(cells)} |")
    for kernel in sorted(chosen):
        if "margin" in trained[kernel]:
            print(
                f"{kernel}: the best training mean leads the default's by "
                f"{trained[kernel]['margin']:.4f}, one standard error of that lead "
                f"{trained[kernel]['margin_se']:.4f}: {chosen[kernel]} chosen"
            )
    print()
    return scores


def space_scale(quick: bool) -> list[str]:
    """The proposal time of the guided search on a lazy product of 10^6 configs."""
    import numpy as np

    from tileauto.records import LatencyStats, Trial, TrialStatus
    from tileauto.search import run_search
    from tileauto.space import product

    lines = []
    values = {name: list(range(10)) for name in "abcdef"}
    for label, rules in (("no constraint", []), ("3 expressions", ["a % 2 == 0", "b + c < 12"])):
        space = product(**values, constraints=rules)
        weights = np.random.default_rng(0).uniform(0.5, 2.0, size=6)

        def measure(indices: list[int], space: Any = space, w: Any = weights) -> Any:
            codes = space.codes(indices)
            for i, row in zip(indices, codes):
                ms = float(1.0 + ((row - 4.5) ** 2 * w).sum() / 100)
                stats = LatencyStats(ms, ms, ms, ms, ms, 1)
                yield i, Trial(i, space.config(i), TrialStatus.OK, latency=stats)

        timed = Timed(GuidedSearch())
        trials = 200 if quick else 400
        start = time.perf_counter()
        run_search(timed, space, measure, max_trials=trials, parallelism=PARALLELISM)
        lines.append(
            f"| lazy product of 10^6, {label} ({len(space):,} configs) | {trials} | "
            f"{1e3 * timed.ask_s / max(timed.proposed, 1):.2f} | "
            f"{1e3 * timed.ask_cpu_s / max(timed.proposed, 1):.2f} | "
            f"{time.perf_counter() - start:.1f} |"
        )
    return lines


def _names(folder: str, only: str) -> tuple[list[str], list[str]]:
    """The recorded spaces of ``folder`` to score (those whose names hold a part of ``only``)
    and all of them (the priors' pool)."""
    every = [f.name.split(".")[0] for f in sorted(Path(folder).glob("*.json*"))]
    names = [n for n in every if not only or any(o in n for o in only.split(","))]
    if not names:
        sys.exit(f"no recorded spaces in {folder}" + (f" matching {only!r}" if only else ""))
    return names, every


def _job_key(job: tuple[str, str, str, int, int, Pool, str]) -> str:
    """What makes a replay: every part of its job (the priors' pool by its spaces)."""
    folder, name, strategy, seed, budget, pool, candidate = job
    return json.dumps([folder, name, strategy, seed, budget, sorted(pool), candidate])


def _keyed_job(
    job: tuple[str, str, str, int, int, Pool, str],
) -> tuple[tuple[str, str, str, int, int, Pool, str], dict[str, Any]]:
    return job, run_job(job)


def _logged_replays(log: Path) -> dict[str, dict[str, Any]]:
    """The replays a ``--log`` file holds, by job; a last line cut short by a kill is left out."""
    rows: dict[str, dict[str, Any]] = {}
    if not log.exists():
        return rows
    for line in log.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows[row.pop("key")] = row
    return rows


def _replay_all(
    jobs: list[tuple[str, str, str, int, int, Pool, str]],
    processes: int,
    began: float,
    by: dict[tuple[str, str, str], list[dict[str, Any]]],
    sizes: dict[str, int],
    log: Path | None = None,
) -> None:
    """Run the replays ``jobs`` on ``processes`` processes, longest first, into ``by``.

    With ``log``, each replay is appended to that file as it ends, and the replays it holds
    already (an earlier run of the same jobs, stopped or killed) are taken from it, not run
    again: a long bench resumes where it stopped."""
    done_before = _logged_replays(log) if log is not None else {}
    todo = []
    for job in jobs:
        row = done_before.get(_job_key(job))
        if row is None:
            todo.append(job)
        else:
            by.setdefault((row["space"], row["strategy"], row["candidate"]), []).append(row)
    if len(todo) < len(jobs):
        print(f"  {len(jobs) - len(todo)} replays taken from {log}", file=sys.stderr, flush=True)
    jobs = sorted(todo, key=lambda j: -sizes[j[1]] * (10 if j[2] == "tpe" else 1))
    if not jobs:
        return
    with contextlib.ExitStack() as stack:
        out_file = stack.enter_context(open(log, "a+")) if log is not None else None
        if out_file is not None and out_file.tell() > 0:
            out_file.seek(out_file.tell() - 1)
            if out_file.read(1) != "\n":  # a line cut short by a kill: end it
                out_file.write("\n")
        pool = stack.enter_context(
            multiprocessing.get_context("fork").Pool(processes, initializer=_warm)
        )
        for done, (job, out) in enumerate(pool.imap_unordered(_keyed_job, jobs), 1):
            by.setdefault((out["space"], out["strategy"], out["candidate"]), []).append(out)
            if out_file is not None:
                out_file.write(json.dumps({"key": _job_key(job), **out}) + "\n")
                out_file.flush()
            if done % 50 == 0 or done == len(jobs):
                print(
                    f"  {done}/{len(jobs)} replays, {time.perf_counter() - began:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--budgets", default=None, help="percentages, e.g. 1,2,5")
    parser.add_argument(
        "--strategies", default=None,
        help=f"comma-separated, among {','.join(ALL)} (default: all; guided+device only with "
        "--prior-extra)",
    )  # fmt: skip
    parser.add_argument("--spaces", default=str(SPACES))
    parser.add_argument("--only", default="", help="comma-separated parts of space file names")
    parser.add_argument(
        "--holdout", default=None, metavar="DIR",
        help="score on the recorded spaces of DIR instead, the guided search's settings chosen "
        "on all of --spaces (bench/record_cpu_spaces.py records such spaces)",
    )  # fmt: skip
    parser.add_argument(
        "--prior-extra", action="append", default=[], metavar="DIR",
        help="more records for the priors (never scored): the same kernels on other devices "
        "(repeat for more folders)",
    )  # fmt: skip
    parser.add_argument("--tpe-seeds", type=int, default=None, help="TPE's seeds (slow)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--plot", default=None, help="draw the held-out figures into IMG")
    parser.add_argument(
        "--log", type=Path, default=None, metavar="FILE",
        help="append each replay to FILE as it ends, and take the replays FILE holds from an "
        "earlier run (stopped or killed) instead of running them again",
    )  # fmt: skip
    parser.add_argument("--json", default=None, help="write every number to FILE")
    parser.add_argument("--no-scale", action="store_true", help="skip the 10^6 product timing")
    parser.add_argument(
        "--candidate", default=None, choices=list(CANDIDATES),
        help="with --holdout: the guided search's settings as given, not chosen on --spaces "
        "again (a choice depends only on --spaces, --seeds, --budgets and --select: an "
        "earlier run's printed choice is this run's)",
    )  # fmt: skip
    parser.add_argument(
        "--select", choices=["1se", "best"], default="1se",
        help="how a split chooses its candidate (see held_out); 1se: the default unless beaten "
        "by more than one standard error",
    )  # fmt: skip
    args = parser.parse_args()
    if args.jobs < 1 or args.jobs > (os.cpu_count() or 1):
        sys.exit(f"--jobs must be between 1 and the {os.cpu_count()} CPUs here, got {args.jobs}")
    began = time.perf_counter()
    seeds = args.seeds or (5 if args.quick else 20)
    shares = [
        float(x) / 100 for x in (args.budgets or ("1,2" if args.quick else "1,2,5")).split(",")
    ]
    if args.strategies is None:
        strategies = [s for s in ALL if s != "guided+device" or args.prior_extra]
    else:
        strategies = [s for s in args.strategies.split(",") if s]
    unknown = [s for s in strategies if s not in ALL]
    if unknown:
        sys.exit(f"--strategies: unknown {unknown}; choose among {ALL}")
    if "guided+device" in strategies and not args.prior_extra:
        sys.exit("--strategies: guided+device needs --prior-extra DIR (the same problems "
                 "recorded on other devices), got none")  # fmt: skip
    select = [k for k, share in enumerate(shares) if share <= 0.02] or [0]
    folder = args.holdout or args.spaces
    names, all_names = _names(folder, args.only)
    pool = [(folder, n) for n in all_names]
    for extra in args.prior_extra:
        pool += [(extra, n) for n in _names(extra, "")[1]]
    sizes = {n: len(_record(folder, n)) for n in names}
    budgets = {n: [max(1, math.ceil(s * sizes[n] - 1e-9)) for s in shares] for n in names}
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    chosen: dict[str, str] = {}
    trained: dict[str, dict[str, float]] = {}
    if args.candidate is not None and not args.holdout:
        sys.exit(f"--candidate is for --holdout runs, got --candidate {args.candidate} alone")
    if args.holdout and args.candidate is not None:
        chosen = dict.fromkeys(sorted({kernel_of(n) for n in names}), args.candidate)
        print(f"the guided search's settings as given (--candidate): {args.candidate}\n")
    elif args.holdout and "guided" in strategies:
        # the guided search's settings, chosen on every space of --spaces
        train, _ = _names(args.spaces, "")
        train_budgets = {
            n: [max(1, math.ceil(s * len(_record(args.spaces, n)) - 1e-9)) for s in shares]
            for n in train
        }
        last = max(select)  # replays run to the largest budget that selection reads
        jobs = [(args.spaces, n, "guided", seed, train_budgets[n][last], [], c)
                for c in CANDIDATES for n in train for seed in range(seeds)]  # fmt: skip
        print(f"{time.strftime('%Y-%m-%d %H:%M')}: choosing the guided search's settings on "
              f"{len(train)} spaces of {args.spaces}: {len(jobs)} replays")  # fmt: skip
        train_sizes = {n: len(_record(args.spaces, n)) for n in train}
        _replay_all(jobs, args.jobs, began, by, train_sizes, args.log)
        choice, scores = choose(by, train, train_budgets, select, args.select)
        kernels = sorted({kernel_of(n) for n in names})
        chosen = dict.fromkeys(kernels, choice)
        trained = {k: scores for k in kernels}
        print(f"chosen on {args.spaces}: {choice} (training means: "
              f"{', '.join(f'{c} {v:.4f}' for c, v in scores.items())})\n")  # fmt: skip
    jobs = []
    for strategy in strategies:
        if args.holdout:
            candidates = [chosen[kernel_of(names[0])]] if strategy == "guided" else ["default"]
        else:
            candidates = list(CANDIDATES) if strategy == "guided" else ["default"]
        for candidate in candidates:
            for n in names:
                for seed in range(args.tpe_seeds or seeds if strategy == "tpe" else seeds):
                    jobs.append((folder, n, strategy, seed, budgets[n][-1], pool, candidate))
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}: {len(names)} spaces{' held out' if args.holdout else ''}"
        f", {seeds} seeds, budgets {[f'{s:.0%}' for s in shares]}, {PARALLELISM} configs per "
        f"batch, {len(jobs)} replays on {args.jobs} processes\n"
    )
    _replay_all(jobs, args.jobs, began, by, sizes, args.log)
    replay_s = time.perf_counter() - began
    per_split = "guided" in strategies and not args.holdout
    if per_split:
        chosen, trained = held_out(by, names, budgets, select, args.select)

    def runs(n: str, s: str) -> list[dict[str, Any]]:
        return by[(n, s, chosen[kernel_of(n)] if s == "guided" else "default")]

    table: dict[str, dict[str, list[float]]] = {
        n: {s: [_median_at(runs(n, s), b) for b in budgets[n]] for s in strategies} for n in names
    }
    candidates = {}
    if per_split:
        print(
            "Settings chosen per held-out kernel (on the other kernels, mean over the budgets "
            f"{', '.join(f'{shares[k]:.0%}' for k in select)}): {chosen}\n"
        )
        candidates = _print_candidates(by, names, budgets, shares, chosen, trained)
    _print_tables(table, names, strategies, shares, budgets)
    _print_splits(table, names, strategies, shares)
    # the same, of the means over the seeds: what tells apart two medians tied at 1.000
    means = {
        n: {s: [statistics.fmean(r["scores"][b - 1] for r in runs(n, s)) for b in budgets[n]]
            for s in strategies}
        for n in names
    }  # fmt: skip
    _print_splits(means, names, strategies, shares, "means over the seeds")
    reach = _print_reach({(n, st): runs(n, st) for n in names for st in strategies}, names,
                         strategies, shares[-1])  # fmt: skip
    leads: dict[str, dict[str, list[str]]] = {}
    if "guided" in strategies:
        paired = {(n, st): runs(n, st) for n in names for st in strategies}
        for center in ("median", "mean"):
            _print_against(paired, names, strategies, budgets, shares, center=center)
        leads = _print_split_leads(paired, names, strategies, budgets, shares)
    ask = _print_ask(by, names, strategies)
    scale = [] if args.no_scale else space_scale(args.quick)
    if scale:
        print("| proposal time on | trials | ask, ms per config | CPU ms per config | wall, s |")
        print("| --- | --- | --- | --- | --- |")
        print("\n".join(scale))
    total = time.perf_counter() - began
    print(
        f"\nreplays took {replay_s:.0f} s, the whole bench {total:.0f} s, on {args.jobs} processes"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "table": table,
                    "chosen": chosen,
                    "candidates": candidates,
                    "trained": trained,
                    "ask_ms": ask,
                    "reach": reach,
                    "split_leads": leads,
                    "budgets": budgets,
                    "shares": shares,
                    "seconds": total,
                    # every replay's score at each budget of its space (training ones too)
                    "replays": _replay_rows(by, shares),
                },
                indent=1,
            )
        )
    if args.plot:
        title = (
            f"optimum / best found on {Path(args.holdout).name}/ (held out)"
            if args.holdout
            else None
        )
        _plot(table, names, strategies, shares, args.plot, *([title] if title else []))


def _replay_rows(
    by: dict[tuple[str, str, str], list[dict[str, Any]]], shares: list[float]
) -> list[dict[str, Any]]:
    """Each replay's score at each budget (a share of its space): what an analysis of the
    seeds (a nested choice, a paired comparison) needs without replaying again. A replay that
    ran to a smaller budget than a share has no score there."""
    rows = []
    for runs in by.values():
        for r in runs:
            size = r["size"]
            at = {}
            for share in shares:
                trials = max(1, math.ceil(share * size - 1e-9))
                if trials <= len(r["scores"]):
                    at[f"{share:g}"] = r["scores"][trials - 1]
            rows.append({k: r[k] for k in ("space", "strategy", "candidate", "seed")} | {"at": at})
    return rows


def _print_tables(
    table: dict[str, dict[str, list[float]]],
    names: list[str],
    strategies: list[str],
    shares: list[float],
    budgets: dict[str, list[int]],
) -> None:
    for k, share in enumerate(shares):
        print(f"## Held out, {share:.0%} of each space: median score over the seeds")
        print(f"| space (trials) | {' | '.join(strategies)} |")
        print(f"| --- | {' | '.join('---' for _ in strategies)} |")
        for n in names:
            cells = [f"{table[n][s][k]:.3f}" for s in strategies]
            print(f"| {n} ({budgets[n][k]}) | {' | '.join(cells)} |")
        means = [statistics.fmean(table[n][s][k] for n in names) for s in strategies]
        worst = [min(table[n][s][k] for n in names) for s in strategies]
        print(f"| **mean** | {' | '.join(f'**{m:.3f}**' for m in means)} |")
        print(f"| worst space | {' | '.join(f'{w:.3f}' for w in worst)} |\n")


def _print_splits(
    table: dict[str, dict[str, list[float]]],
    names: list[str],
    strategies: list[str],
    shares: list[float],
    of: str = "medians",
) -> None:
    print(f"## Per held-out kernel: mean of per-space {of} (1st / 2nd / ... budget)")
    print(f"| kernel left out | {' | '.join(strategies)} |")
    print(f"| --- | {' | '.join('---' for _ in strategies)} |")
    for kernel, part in _by_kernel(names):
        cells = [
            " / ".join(
                f"{statistics.fmean(table[n][s][k] for n in part):.3f}" for k in range(len(shares))
            )
            for s in strategies
        ]
        _row(kernel, part, cells)
    print()


def _by_kernel(names: list[str]) -> list[tuple[str, list[str]]]:
    """Each kernel (a held-out split) with its spaces among ``names``, in kernel order."""
    return [
        (k, [n for n in names if kernel_of(n) == k]) for k in sorted(set(map(kernel_of, names)))
    ]


def _row(kernel: str, part: list[str], cells: list[str]) -> None:
    print(f"| {kernel} ({len(part)}) | {' | '.join(cells)} |")


REACH = (0.99, 1.0)  # within 1% of the optimum, and the optimum itself


def _trials_to(scores: list[float], bar: float) -> int | None:
    """The trials a replay took to score ``bar`` or more (None: it never did)."""
    return next((k + 1 for k, score in enumerate(scores) if score >= bar - 1e-12), None)


def _print_reach(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    names: list[str],
    strategies: list[str],
    share: float,
) -> dict[str, dict[str, list[float]]]:
    """Per held-out kernel, the trials each strategy took to come within 1% of the optimum
    and to the optimum: the median over the seeds, as a share of the space, averaged over the
    kernel's spaces. Where two strategies both score 1.000 at a budget, this tells which got
    there first. A replay that never got there counts as its whole budget (``share``): such
    a median is a lower bound, marked ``>=``."""
    print(
        f"## Per held-out kernel: trials to within 1% of the optimum / to the optimum, the "
        f"median over the seeds as a share of the space, mean over its spaces (a replay that "
        f"never got there counts as {share:.0%}; >=: such a median)"
    )
    print(f"| kernel left out | {' | '.join(strategies)} |")
    print(f"| --- | {' | '.join('---' for _ in strategies)} |")
    out: dict[str, dict[str, list[float]]] = {}
    for kernel, part in _by_kernel(names):
        cells = []
        for s in strategies:
            shown, values = [], []
            for bar in REACH:
                medians, censored = [], False
                for n in part:
                    size = runs[n, s][0]["size"]
                    took = [_trials_to(r["scores"], bar) for r in runs[n, s]]
                    limit = max(len(r["scores"]) for r in runs[n, s])
                    median = statistics.median(limit if t is None else t for t in took)
                    censored |= 2 * sum(t is None for t in took) >= len(took)
                    medians.append(median / size)
                mean = statistics.fmean(medians)
                values.append(mean)
                shown.append(f"{'>=' if censored else ''}{100 * mean:.2f}%")
            out.setdefault(kernel, {})[s] = values
            cells.append(" / ".join(shown))
        _row(kernel, part, cells)
    print()
    return out


def _print_against(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    names: list[str],
    strategies: list[str],
    budgets: dict[str, list[int]],
    shares: list[float],
    draws: int = 2000,
    center: str = "median",
) -> None:
    """Guided's lead over each other strategy (mean over the spaces of the difference of the
    medians over the seeds, or of the means: ``center``), with a 90% bootstrap interval: the
    seeds drawn again with replacement, the same draw for both strategies (paired by seed).

    Both are printed: the medians are the issue's measure, but on a space with a handful of
    good configs one run's score is nearly two-valued, and the bootstrap interval of a
    difference of medians of 20 such runs is too narrow (a 0.037 "lead" at 20 seeds, interval
    [+0.011, +0.061], was +0.002 [-0.008, +0.012] on the means of 100: docs/search.md, the
    fifth test). The difference of means is what the bootstrap estimates well."""
    print(f"## guided's lead, mean over the spaces of the difference of {center}s [90% "
          "bootstrap interval over the seeds, paired]")  # fmt: skip
    others = [s for s in strategies if s != "guided"]
    print(f"| budget | {' | '.join(others)} |")
    print(f"| --- | {' | '.join('---' for _ in others)} |")
    for k, share in enumerate(shares):
        cells = []
        for other in others:
            got = _lead(runs, names, other, budgets, k, center, draws)
            cells.append("-" if got is None else "{:+.4f} [{:+.4f}, {:+.4f}]".format(*got))
        print(f"| {share:.0%} | {' | '.join(cells)} |")
    print()


def _lead(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    names: list[str],
    other: str,
    budgets: dict[str, list[int]],
    k: int,
    center: str,
    draws: int = 2000,
) -> tuple[float, float, float] | None:
    """Guided's lead over ``other`` at budget ``k`` on ``names`` and its 90% bootstrap interval
    (see :func:`_print_against`); None where a space has no seed both ran."""
    import random

    rng = random.Random(0)
    middle = statistics.median if center == "median" else statistics.fmean

    def by_seed(n: str, s: str) -> dict[int, float]:
        return {r["seed"]: r["scores"][budgets[n][k] - 1] for r in runs[n, s]}

    pairs = []
    for n in names:
        mine, theirs = by_seed(n, "guided"), by_seed(n, other)
        pairs.append([(mine[x], theirs[x]) for x in sorted(mine.keys() & theirs.keys())])
    if any(not p for p in pairs):
        return None

    def lead(draw: list[list[tuple[float, float]]]) -> float:
        return statistics.fmean(middle([a for a, _ in d]) - middle([b for _, b in d]) for d in draw)

    boot = sorted(lead([rng.choices(p, k=len(p)) for p in pairs]) for _ in range(draws))
    return lead(pairs), boot[int(0.05 * draws)], boot[int(0.95 * draws) - 1]


def _print_split_leads(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    names: list[str],
    strategies: list[str],
    budgets: dict[str, list[int]],
    shares: list[float],
) -> dict[str, dict[str, list[str]]]:
    """Per held-out kernel, guided against each other strategy at each budget: ``ahead``
    (the 90% interval of the lead on the means over the seeds above zero), ``behind`` (below)
    or ``level``, with the lead; the issue asks for ahead on every split. Returns the verdicts."""
    others = [s for s in strategies if s != "guided"]
    print("## Per held-out kernel: guided's lead on the means over the seeds [90% interval], "
          "1st / 2nd / ... budget")  # fmt: skip
    print(f"| kernel left out | {' | '.join(others)} |")
    print(f"| --- | {' | '.join('---' for _ in others)} |")
    verdicts: dict[str, dict[str, list[str]]] = {}
    for kernel, part in _by_kernel(names):
        cells = []
        for other in others:
            said = []
            for k in range(len(shares)):
                got = _lead(runs, part, other, budgets, k, "mean")
                if got is None:
                    said.append("-")
                    continue
                point, low, high = got
                word = "ahead" if low > 0 else "behind" if high < 0 else "level"
                verdicts.setdefault(kernel, {}).setdefault(other, []).append(word)
                said.append(f"{word} {point:+.3f} [{low:+.3f}, {high:+.3f}]")
            cells.append(" / ".join(said))
        _row(kernel, part, cells)
    print()
    return verdicts


def _print_ask(
    by: dict[tuple[str, str, str], list[dict[str, Any]]], names: list[str], strategies: list[str]
) -> dict[str, dict[str, float]]:
    print("## Proposal time: ask(), ms per proposed config, wall / CPU (mean over seeds)")
    print(f"| space | {' | '.join(strategies)} |")
    print(f"| --- | {' | '.join('---' for _ in strategies)} |")
    out: dict[str, dict[str, float]] = {}
    for n in names:
        row = {}
        for s in strategies:
            runs = [r for (sp, st, _), rs in by.items() if sp == n and st == s for r in rs]
            proposed = max(sum(r["proposed"] for r in runs), 1)
            row[s] = 1e3 * sum(r["ask_s"] for r in runs) / proposed
            row[s + " cpu"] = 1e3 * sum(r["ask_cpu_s"] for r in runs) / proposed
        out[n] = row
        cells = [f"{row[s]:.2f} / {row[s + ' cpu']:.2f}" for s in strategies]
        print(f"| {n} | {' | '.join(cells)} |")
    print()
    return out


def _plot(
    table: dict[str, dict[str, list[float]]],
    names: list[str],
    strategies: list[str],
    shares: list[float],
    path: str,
    title: str = "optimum / best found, held out (leave one kernel / device out)",
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = sorted({kernel_of(n) for n in names})
    panels: list[str | None] = [*kernels, None] if len(kernels) > 1 else kernels
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels) + 2.4, 3.4), squeeze=False)
    axes = axes[0]
    xs = [100 * s for s in shares]
    markers = "osD^vP*Xh<>p"
    for ax, kernel in zip(axes, panels):
        part = [n for n in names if kernel is None or kernel_of(n) == kernel]
        for i, s in enumerate(strategies):  # more lines than colours: marker and dash tell them
            ys = [statistics.fmean(table[n][s][k] for n in part) for k in range(len(shares))]
            ax.plot(
                xs, ys, label=s, color=f"C{i % 10}", marker=markers[i % len(markers)],
                linestyle="--" if s in BASELINES else "-", markersize=5,
            )  # fmt: skip
        ax.set_title(f"{kernel} ({len(part)} spaces)" if kernel else "all spaces", fontsize=9)
        ax.set_xlabel("budget, % of the space")
        ax.set_xticks(xs)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held out: mean of per-space medians")
    axes[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
