"""The search loop that the tuning session and the replay share: ask, measure, tell, stop.

``run_search`` owns the budgets; the strategy only proposes, and ``measure`` only measures (a
session compiles and runs the batch; a replay looks it up in a record), so the same strategy
code runs the same way in both.
"""

from __future__ import annotations

import enum
import numbers
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tileauto.records import Trial
from tileauto.search.base import SearchStrategy
from tileauto.space import Space, as_space

Measure = Callable[[list[int]], Iterable[tuple[int, Trial]]]
STUCK_ASKS = 1000  # asks in a row with nothing new after which a strategy is done, any space


class StopReason(str, enum.Enum):
    """Why a search stopped (the value is what reports print)."""

    DONE = "done"  # the strategy proposed all it wanted, or no config of the space is left
    MAX_TRIALS = "max_trials"
    MAX_SECONDS = "max_seconds"
    PLATEAU = "plateau"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SearchOutcome:
    """What a search measured and why it stopped.

    Attributes:
        stop_reason: a :class:`StopReason` (a str: ``"done"``, ``"max_trials"``,
            ``"max_seconds"``, ``"plateau"``).
        trials: every measured config's trial by index (the ``known`` ones included).
        never_tried: configs of the space that have no trial (not failures: never measured);
            None when the space was not counted (a constrained product scanned only as far as
            the search went).
        best_index: the fastest passing config's index, or None when none passed.
        strategy_s: wall seconds spent in the strategy's ``start``, ``ask`` and ``tell`` (not
            compared: it differs from run to run).
        strategy: the strategy as it ran: the one given, or the copy a strategy that sizes
            itself to ``max_trials`` made of itself (``AutoSearch.within``); what it learned
            (``prior_facts()``) is read from this one. Not compared.
    """

    stop_reason: StopReason
    trials: dict[int, Trial]
    never_tried: int | None
    best_index: int | None = None
    strategy_s: float = field(default=0.0, compare=False)
    strategy: Any = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        """One line for a report: what stopped the search and what was left."""
        what = {
            StopReason.DONE: "the strategy proposed no more configs",
            StopReason.MAX_TRIALS: "max_trials was reached",
            StopReason.MAX_SECONDS: "max_seconds ran out",
            StopReason.PLATEAU: "the best latency stopped improving (plateau)",
        }[self.stop_reason]
        if self.stop_reason is StopReason.DONE and self.never_tried == 0:
            what = "every config of the space was measured"
        rest = "the rest" if self.never_tried is None else self.never_tried
        return f"search stopped: {what}; {len(self.trials)} measured, {rest} never tried"


def prior_facts_of(strategy: Any) -> dict[str, Any] | None:
    """What became of a strategy's prior after its search (its ``prior_facts()``: the records
    it used and those it dropped, with why); None for a strategy without a prior."""
    facts = getattr(strategy, "prior_facts", None)
    return facts() if callable(facts) else None


class _Plateau:
    """Counts trials since the best latency last improved by more than its timing spread."""

    def __init__(self) -> None:
        self.best: Trial | None = None
        self.since = 0

    def add(self, trial: Trial) -> None:
        latency = trial.latency_ms if trial.ok else None
        if latency is None:
            self.since += self.best is not None
            return
        best = self.best.latency_ms if self.best is not None else None
        if self.best is None or best is None:
            self.best, self.since = trial, 0
            return
        spread = self.best.latency.spread_ms if self.best.latency is not None else 0.0
        if latency < best - spread:
            self.best, self.since = trial, 0
        else:
            if latency < best:
                self.best = trial  # faster, but within the noise: not an improvement
            self.since += 1


def _next_batch(
    ask: Callable[[], Iterable[int]],
    ahead: list[int],
    trials: Mapping[int, Trial],
    inside: Callable[[int], bool],
    stuck: int,
    stop_now: Callable[[], StopReason | None],
    who: str = "the strategy",
) -> tuple[list[int], StopReason | None]:
    """The strategy's next proposals that are new (``ahead`` first), or why there are none.

    A proposal of a config measured already (one in ``first``, say, that the strategy did not
    count as its own) is dropped, and the strategy is asked again, the budgets checked before
    each ask; it is done when it proposes nothing, or only measured configs
    ``stuck`` times in a row (``min(len(space), STUCK_ASKS)``).
    """
    for _ in range(max(1, stuck)):
        proposed = _indices(ask(), who)
        batch = list(dict.fromkeys(i for i in [*ahead, *proposed] if i not in trials and inside(i)))
        if batch or not proposed:
            return batch, None
        reason = stop_now()
        if reason is not None:
            return [], reason
    return [], None


def _indices(proposed: Any, who: str) -> list[int]:
    """A strategy's proposals as ints; a TypeError naming its ask() for anything else."""
    if isinstance(proposed, list) and all(type(i) is int for i in proposed):
        return proposed  # the common case, checked at the cost of one pass
    kind = getattr(proposed, "dtype", None)
    if getattr(kind, "kind", None) in ("i", "u") and getattr(proposed, "ndim", 0) == 1:
        return [int(i) for i in proposed.tolist()]  # an integer array
    if (
        proposed is None
        or isinstance(proposed, (str, bytes, dict))
        or not isinstance(proposed, Iterable)
    ):
        raise TypeError(
            f"{who}.ask() must return a list of int indices of the space ([] when it has "
            f"nothing more to propose), got {type(proposed).__name__} {proposed!r:.60}"
        )
    out = []
    for i in proposed:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(
                f"{who}.ask() must return int indices of the space, got {type(i).__name__} "
                f"{i!r:.60} among its proposals"
            )
        out.append(int(i))
    return out


def _count(name: str, value: Any) -> int | None:
    """A budget given as an int >= 1 (a numpy int too), or None; a ValueError naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")
    return int(value)


def run_search(
    strategy: SearchStrategy,
    space: Space | Iterable[dict[str, Any]],
    measure: Measure,
    *,
    max_trials: int | None = None,
    max_seconds: float | None = None,
    plateau: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    parallelism: int = 1,
    seed: int = 0,
    known: Mapping[int, Trial] | None = None,
    started_at: float | None = None,
    first: Sequence[int] = (),
) -> SearchOutcome:
    """Drive ``strategy`` over ``space`` until it is done or a budget stops it.

    Args:
        strategy: a started or fresh strategy (it is started here; see
            :func:`tileauto.search.resolve_search` for names).
        space: the configs (a :class:`tileauto.space.Space`, or a list of dicts).
        measure: measures a batch of indices and gives ``(index, trial)`` for each, in any
            order. A generator (an iterator) measures as it is iterated: when a budget runs
            out in the middle of a batch, the loop stops iterating and closes it (its
            ``finally`` can cancel what is in flight); the indices it did not yield are never
            tried. A list (or any other iterable) holds trials measured already: every one
            is kept and counted, and the budgets are checked after the batch.
        max_trials: the most configs to measure (``known`` ones do not count).
        max_seconds: the most seconds of ``clock`` since ``started_at`` (default: now).
        plateau: stop after this many trials in a row that do not beat the best latency by
            more than its timing spread (p80 - p20).
        clock: the time source (a fake one in tests; replays pass recorded seconds).
        parallelism: how many configs can be measured at once (sizes the strategy's batches).
        seed: the seed the strategy is started with.
        known: trials measured before the loop (the default config, a cache): told to the
            strategy first, never proposed again.
        started_at: the ``clock`` value that ``max_seconds`` counts from.
        first: indices measured in the first batch, ahead of the strategy's (the default
            config, when the space has it: it is measured anyway, as the reference); they
            count as trials and are told to the strategy like its own.
    """
    max_trials = _count("max_trials", max_trials)
    plateau = _count("plateau", plateau)
    if max_seconds is not None and (
        isinstance(max_seconds, bool)
        or not isinstance(max_seconds, numbers.Real)
        or not max_seconds > 0
    ):
        raise ValueError(f"max_seconds must be a number > 0 or None, got {max_seconds!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    seed = int(seed)
    space = as_space(space)
    # a constrained product is counted only where asked: an index is checked against the
    # configs found so far, scanning on only for an index past them
    n = len(space) if space.counted else None

    def inside(i: int) -> bool:
        return i >= 0 and (i < n if n is not None else space.count_upto(i + 1) > i)

    start = clock() if started_at is None else started_at
    bound = getattr(strategy, "within", None)  # a strategy that sizes itself to the budget
    if max_trials is not None and callable(bound):
        strategy = bound(max_trials)
    in_strategy = [0.0]  # wall seconds inside the strategy (a replay reports them)

    def timed(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            in_strategy[0] += time.perf_counter() - began

    timed(strategy.start, space, parallelism=parallelism, seed=seed)
    trials: dict[int, Trial] = {}
    stall = _Plateau()
    for index, trial in (known or {}).items():
        if inside(index):
            trials[index] = trial
            timed(strategy.tell, index, trial)
            stall.add(trial)
    stall.since = 0
    measured = 0

    def stop_now() -> StopReason | None:
        if max_trials is not None and measured >= max_trials:
            return StopReason.MAX_TRIALS
        if max_seconds is not None and clock() - start >= max_seconds:
            return StopReason.MAX_SECONDS
        if plateau is not None and stall.since >= plateau:
            return StopReason.PLATEAU
        return None

    reason = stop_now()
    stuck = space.count_upto(STUCK_ASKS)
    who = type(strategy).__name__
    ahead = [int(i) for i in first]
    while reason is None:
        batch, reason = _next_batch(
            lambda: timed(strategy.ask), ahead, trials, inside, stuck, stop_now, who
        )
        ahead = []
        if not batch:
            reason = reason or StopReason.DONE
            break
        if max_trials is not None:
            batch = batch[: max_trials - measured]
        produced = measure(batch)
        lazy = isinstance(produced, Iterator)  # else measured already: nothing to save
        results = iter(produced)
        try:
            for index, trial in results:
                if index in trials:
                    continue
                trials[index] = trial
                measured += 1
                timed(strategy.tell, index, trial)
                stall.add(trial)
                if lazy:
                    reason = stop_now()
                    if reason is not None:
                        break
        finally:
            close = getattr(results, "close", None)
            if reason is not None and callable(close):
                close()
        if reason is None:
            reason = stop_now()
    ranked = [(t.latency_ms, i) for i, t in trials.items() if t.ok and t.latency_ms is not None]
    never_tried = len(space) - len(trials) if space.counted else None
    if never_tried == 0:  # a budget that ran out with the last config: nothing was left
        reason = StopReason.DONE
    return SearchOutcome(
        stop_reason=reason,
        trials=trials,
        never_tried=never_tried,
        best_index=min(ranked)[1] if ranked else None,
        strategy_s=in_strategy[0],
        strategy=strategy,
    )
