"""run_search: budgets, plateau, known trials, and what it reports (with fake measures)."""

from __future__ import annotations

import pytest
from search_fakes import bowl, failed_trial, lookup, ok_trial

from tileauto.search import (
    Exhaustive,
    GuidedSearch,
    RandomSearch,
    SearchStrategy,
    StopReason,
    run_search,
)
from tileauto.search.loop import STUCK_ASKS
from tileauto.space import product


class Script(SearchStrategy):
    """Proposes the given batches, in order; records what it was told."""

    def __init__(self, *batches: list[int]) -> None:
        self.batches = [list(b) for b in batches]
        self.told: list[int] = []

    def start(self, space, *, parallelism=1, seed=0):
        super().start(space, parallelism=parallelism, seed=seed)
        self.queue = list(self.batches)
        self.told = []

    def ask(self):
        return self.queue.pop(0) if self.queue else []

    def tell(self, index, trial):
        self.told.append(index)


def latencies(values):
    def measure(indices):
        for i in indices:
            value = values[i]
            yield i, failed_trial(i) if value is None else ok_trial(i, value)

    return measure


SPACE = product(x=list(range(10)))


def test_everything_proposed_is_measured_and_told_then_done():
    strategy = Script([0, 1, 2], [5])
    out = run_search(strategy, SPACE, latencies([3, 2, None, 9, 9, 1, 9, 9, 9, 9]))
    assert out.stop_reason is StopReason.DONE and out.stop_reason == "done"
    assert list(out.trials) == [0, 1, 2, 5] and strategy.told == [0, 1, 2, 5]
    assert out.never_tried == 6 and out.best_index == 5
    assert not out.trials[2].ok  # a failure is told, and is not "never tried"
    assert "never tried" in out.describe() and "no more configs" in out.describe()


def test_repeats_and_indices_outside_the_space_are_ignored():
    strategy = Script([0, 0, 99, -1, 1], [1, 0], [2])
    out = run_search(strategy, SPACE, latencies([1.0] * 10))
    # [1, 0] has nothing new: dropped, and the strategy is asked again; [] ends the search
    assert list(out.trials) == [0, 1, 2]
    assert out.stop_reason is StopReason.DONE


def test_a_strategy_that_proposes_only_measured_configs_ends_the_search():
    class Stuck(Script):
        def ask(self):
            return [0]

    out = run_search(Stuck(), SPACE, latencies([1.0] * 10))
    assert list(out.trials) == [0] and out.stop_reason is StopReason.DONE


def test_max_trials_cuts_the_batch_before_measuring():
    asked = []

    def measure(indices):
        asked.append(list(indices))
        return [(i, ok_trial(i, 1.0)) for i in indices]

    out = run_search(Exhaustive(), SPACE, measure, max_trials=4)
    assert asked == [[0, 1, 2, 3]] and out.stop_reason is StopReason.MAX_TRIALS
    assert out.never_tried == 6


def test_max_seconds_stops_in_the_middle_of_a_batch_and_closes_the_measure():
    now = [0.0]
    closed = []

    def measure(indices):
        try:
            for i in indices:
                now[0] += 1.0  # each config takes a second
                yield i, ok_trial(i, 1.0)
        finally:
            closed.append(True)  # a session cancels its compiles here

    out = run_search(Exhaustive(), SPACE, measure, max_seconds=3.5, clock=lambda: now[0])
    assert out.stop_reason is StopReason.MAX_SECONDS and len(out.trials) == 4
    assert closed == [True] and out.never_tried == 6


@pytest.mark.parametrize("budget", [{"max_seconds": 1.5}, {"plateau": 1}])
def test_a_batch_measured_already_is_counted_whole_when_a_budget_runs_out_in_it(budget):
    # the tuner builds and runs a batch before it hands the trials over (a list): a stop in
    # the middle of it counted 2 of the 4 configs measured, the rest as never tried
    now = [0.0]

    def measure(indices):
        now[0] += len(indices)  # the batch took a second per config
        return [(i, ok_trial(i, 1.0)) for i in indices]

    strategy = Script([0, 1, 2, 3], [4, 5])
    out = run_search(strategy, SPACE, measure, clock=lambda: now[0], **budget)
    assert list(out.trials) == [0, 1, 2, 3] and strategy.told == [0, 1, 2, 3]
    assert out.never_tried == 6 and out.stop_reason is not StopReason.DONE


def test_max_seconds_counts_from_started_at():
    now = [10.0]
    out = run_search(
        Exhaustive(),
        SPACE,
        latencies([1.0] * 10),
        max_seconds=5,
        clock=lambda: now[0],
        started_at=4.0,
    )
    assert out.stop_reason is StopReason.MAX_SECONDS and out.trials == {}


def test_plateau_counts_trials_that_do_not_beat_the_best_by_its_spread():
    # spread 1: 9.5 is within the noise of 10 (stall 1), a failure stalls (2), 8.4 beats 9.5 by
    # more than the spread (reset); then 11, 9.0 and 8.0 (not below 8.4 - 1) are 3 stalls
    values = [10.0, 9.5, None, 8.4, 11.0, 9.0, 8.0, 9.0, 1.0, 1.0]
    spreads = [1.0] * 10

    def measure(indices):
        for i in indices:
            v = values[i]
            yield i, failed_trial(i) if v is None else ok_trial(i, v, spreads[i])

    out = run_search(Exhaustive(), SPACE, measure, plateau=3)
    assert out.stop_reason is StopReason.PLATEAU
    assert list(out.trials) == [0, 1, 2, 3, 4, 5, 6]


def test_known_trials_are_told_first_not_counted_and_never_proposed():
    strategy = Script([3, 4, 5])
    known = {3: ok_trial(3, 0.5), 12: ok_trial(12, 0.1)}  # 12 is not in the space: ignored
    out = run_search(strategy, SPACE, latencies([1.0] * 10), known=known, max_trials=2)
    assert strategy.told == [3, 4, 5] and list(out.trials) == [3, 4, 5]
    assert out.best_index == 3 and out.stop_reason is StopReason.MAX_TRIALS


def test_a_measure_that_skips_an_index_leaves_it_never_tried():
    def measure(indices):
        return [(i, ok_trial(i, 1.0)) for i in indices if i != 1]

    out = run_search(Script([0, 1, 2]), SPACE, measure)
    assert sorted(out.trials) == [0, 2] and out.never_tried == 8


def test_bad_budgets_are_named():
    for kwargs, name in (
        ({"max_trials": 0}, "max_trials"),
        ({"plateau": 1.5}, "plateau"),
        ({"max_seconds": 0}, "max_seconds"),
    ):
        with pytest.raises(ValueError, match=name):
            run_search(Exhaustive(), SPACE, latencies([1.0] * 10), **kwargs)


@pytest.mark.parametrize(
    "make, measured",
    [(Exhaustive, 40), (lambda: RandomSearch(5), 5), (lambda: GuidedSearch(30), 30)],
)
def test_the_loop_takes_a_list_of_dicts_as_the_space(make, measured):
    space, latency = bowl()
    configs = list(space)[:40]
    out = run_search(make(), configs, lookup(space, latency), parallelism=2)
    assert out.stop_reason is StopReason.DONE and len(out.trials) == measured


def test_first_indices_ride_with_the_first_batch_count_and_are_told():
    strategy = Script([4, 1, 2], [3])
    batches = []

    def measure(indices):
        batches.append(list(indices))
        yield from latencies([5, 4, 3, 2, 1, 9, 9, 9, 9, 9])(indices)

    out = run_search(strategy, SPACE, measure, max_trials=3, first=[4])
    assert batches == [[4, 1, 2]]  # the strategy's 4 is the same config: measured once
    assert strategy.told == [4, 1, 2] and out.stop_reason is StopReason.MAX_TRIALS
    strategy = Script([1], [2])
    out = run_search(strategy, SPACE, latencies([5] * 10), max_trials=2, first=[7])
    assert list(out.trials) == [7, 1]  # counted against max_trials


class Repeater(SearchStrategy):
    """Proposes config 0 forever (a strategy that keeps proposing what was measured); fails
    the test instead of hanging once asked far more often than any budget allows."""

    def start(self, space, *, parallelism=1, seed=0):
        super().start(space, parallelism=parallelism, seed=seed)
        self.asks = 0

    def ask(self):
        self.asks += 1
        if self.asks > 100_000:
            raise AssertionError(
                "the loop kept asking a strategy that proposes only measured configs"
            )
        return [0]


HUGE = product(**{f"p{k}": list(range(10)) for k in range(12)})  # 10^12 configs


def test_max_seconds_holds_while_a_strategy_proposes_only_measured_configs():
    now = [0.0]

    def clock():
        now[0] += 0.01  # every look at the clock is a hundredth of a second later
        return now[0]

    strategy = Repeater()
    out = run_search(strategy, HUGE, latencies([1.0]), max_trials=3, max_seconds=5, clock=clock)
    assert out.stop_reason is StopReason.MAX_SECONDS and list(out.trials) == [0]
    assert strategy.asks <= 600 and now[0] < 6.1


def test_a_strategy_stuck_on_measured_configs_ends_the_search_on_a_huge_space():
    strategy = Repeater()
    out = run_search(strategy, HUGE, latencies([1.0]), max_trials=3)
    assert out.stop_reason is StopReason.DONE and list(out.trials) == [0]
    assert strategy.asks == 1 + STUCK_ASKS
