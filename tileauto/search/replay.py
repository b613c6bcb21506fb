"""Replay a search on a recorded space: no compile, no run, the recorded trials instead."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto.records import Trial
from tileauto.search.loop import StopReason, prior_facts_of, run_search
from tileauto.search.prior import check_prior, describe_prior
from tileauto.search.recorded import RecordedSpace, check_share
from tileauto.search.resolve import resolve_search


@dataclass(frozen=True)
class ReplayResult:
    """How a strategy did on a recorded space.

    Attributes:
        best_ms: the best latency it found (inf when no config it tried passed).
        optimum_ms: the best latency of the whole record.
        score: ``optimum_ms / best_ms`` (1.0: it found the optimum; 0.0: nothing passed).
        trace: the best latency so far after each trial (inf before the first pass).
        trials: how many configs it measured (failures count).
        best_index: the index of the best config it found (None when nothing passed).
        stop_reason: why the search stopped.
        strategy: the strategy's ``describe()``.
        prior: the ``prior=`` handed to the strategy, described as in a cache key ("" when
            none was, or the strategy takes no prior).
        prior_facts: what became of the prior, as the strategy's ``prior_facts()`` says: the
            records it used (``matched``) and those dropped, each with why (``dropped``); None
            when the strategy had no prior. A replay does not warn about a prior that
            matches nothing (a bench gives misfit priors on purpose): read it here.
        compile_s: the recorded compile seconds of the configs it measured (Kernel Tuner's
            ``compile_time``), failures included.
        run_s: their recorded run seconds (Kernel Tuner's ``verification_time`` and
            ``benchmark_time``).
        strategy_s: the wall seconds the strategy itself took (``start``, ``ask``, ``tell``),
            measured in this replay.
        simulated_s: what a tuning that compiled and ran these configs one after another would
            have taken: ``compile_s + run_s + strategy_s``.

    ``strategy_s`` and ``simulated_s`` change from run to run, so they are not compared: two
    replays with the same seed are equal.
    """

    best_ms: float
    optimum_ms: float
    score: float
    trace: tuple[float, ...]
    trials: int
    best_index: int | None
    stop_reason: StopReason
    strategy: str
    prior: str = ""
    compile_s: float = 0.0
    run_s: float = 0.0
    strategy_s: float = field(default=0.0, compare=False)
    simulated_s: float = field(default=0.0, compare=False)
    prior_facts: dict[str, Any] | None = field(default=None, compare=False)

    def trials_to_reach(self, share: float = 0.05) -> int | None:
        """Trials it took to come within ``share`` of the optimum (None: it never did).

        Raises:
            ValueError: ``share`` is not a number in [0, 1) (5% is 0.05, not 5).
        """
        limit = self.optimum_ms * (1 + check_share(share, "ReplayResult.trials_to_reach"))
        return next((k + 1 for k, best in enumerate(self.trace) if best <= limit), None)


def replay(
    space: RecordedSpace | str | Path,
    strategy: Any = "auto",
    budget: int | float | None = None,
    seed: int = 0,
    *,
    parallelism: int = 8,
    max_seconds: float | None = None,
    plateau: int | None = None,
    prior: Any = None,
) -> ReplayResult:
    """Run a search against a recorded space, through the tuner's own loop.

    Args:
        space: a :class:`RecordedSpace`, or the path of a file :meth:`RecordedSpace.load` reads.
        strategy: a name or a strategy object, as ``search=`` takes.
        budget: the most trials: an int >= 1 (numpy ints too), or a share of the space, a
            float in (0, 1] (``0.02``: 2%); None: until the strategy stops.
        seed: the strategy's seed.
        parallelism: configs measured at once (the batch size a strategy plans for).
        max_seconds: a budget in *recorded* seconds (each trial's compile and run time, as
            measured when the space was recorded, one after another).
        plateau: as in :func:`tileauto.search.run_search`.
        prior: records of the same kernel measured elsewhere (:class:`RecordedSpace`, paths,
            lists of trials, or a callable returning them), handed to a strategy that takes a
            prior (``use_prior``: the guided and auto searches, unless made with a prior of
            their own or ``prior=None``); see :mod:`tileauto.search.prior`. ``"auto"`` is
            refused: a replay has no tuning cache to read. It is handed in on every replay,
            None included, so a strategy object replayed again keeps no earlier replay's
            prior (nor its record's family).

    Raises:
        ValueError: a bad ``budget``, ``seed``, ``parallelism``, ``max_seconds`` or
            ``plateau`` (named), or ``prior="auto"``.
    """
    if isinstance(budget, float):
        if not 0.0 < budget <= 1.0:
            raise ValueError(f"replay() budget given as a share must be in (0, 1], got {budget}")
    elif budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1
    ):
        raise ValueError(
            "replay() budget must be an int >= 1 (trials), a float in (0, 1] (a share of the "
            f"space) or None, got {type(budget).__name__} {budget!r:.60}"
        )
    if (
        isinstance(parallelism, bool)
        or not isinstance(parallelism, numbers.Integral)
        or parallelism < 1
    ):
        raise ValueError(
            "replay() parallelism must be an int >= 1 (configs measured at once), got "
            f"{type(parallelism).__name__} {parallelism!r:.60}"
        )
    if isinstance(prior, str) and prior == "auto":
        raise ValueError(
            'replay() prior="auto" has nothing to read: a replay has no tuning cache; pass '
            "records (a RecordedSpace, a path, a list of trials, a list of these), a callable "
            "returning them, or None (a folder named auto: pass Path('auto'))"
        )
    record = space if isinstance(space, RecordedSpace) else RecordedSpace.load(space)
    n = len(record)
    if isinstance(budget, float):
        budget = max(1, math.ceil(budget * n - 1e-9))
    elif budget is not None:
        budget = int(budget)
    chosen = resolve_search(strategy)
    hand_in = getattr(chosen, "use_prior", None)
    if prior is not None:
        check_prior(prior, "replay()")  # a missing path: named here, not a bare OSError later
    # handed in every time, None included: an object replayed again forgets the last prior
    if callable(hand_in):
        hand_in(prior)
    family = getattr(chosen, "use_family", None)
    if callable(family):  # the prior's records of it: the same problem
        family(record.family or None)
    spent = [0.0]

    def measure(indices: list[int]) -> Any:
        for i in indices:
            trial: Trial = record.trials[i]
            spent[0] += (trial.compile_s or 0.0) + (trial.run_s or 0.0)
            yield i, trial

    outcome = run_search(
        chosen,
        record.space,
        measure,
        max_trials=budget,
        max_seconds=max_seconds,
        plateau=plateau,
        clock=lambda: spent[0],
        parallelism=int(parallelism),
        seed=seed,
        started_at=0.0,
    )
    trace, best = [], math.inf
    for index in outcome.trials:  # in the order they were measured
        trial = outcome.trials[index]
        if trial.ok and trial.latency_ms is not None:
            best = min(best, trial.latency_ms)
        trace.append(best)
    optimum = record.optimum_ms
    compile_s = math.fsum(t.compile_s or 0.0 for t in outcome.trials.values())
    run_s = math.fsum(t.run_s or 0.0 for t in outcome.trials.values())
    return ReplayResult(
        best_ms=best,
        optimum_ms=optimum,
        score=optimum / best if math.isfinite(best) else 0.0,
        trace=tuple(trace),
        trials=len(outcome.trials),
        best_index=outcome.best_index,
        stop_reason=outcome.stop_reason,
        strategy=chosen.describe(),
        prior=describe_prior(prior) if prior is not None and callable(hand_in) else "",
        compile_s=compile_s,
        run_s=run_s,
        strategy_s=outcome.strategy_s,
        simulated_s=compile_s + run_s + outcome.strategy_s,
        prior_facts=prior_facts_of(outcome.strategy),
    )
