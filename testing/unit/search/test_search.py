"""tileauto.search strategies driven by hand (start, ask, tell), custom strategies in the loop,
and strategies by name (resolve_search)."""

from __future__ import annotations

import pytest

from tileauto.records import Trial, TrialStatus
from tileauto.search import (
    AutoSearch,
    Exhaustive,
    GuidedSearch,
    RandomSearch,
    SearchStrategy,
    resolve_search,
    run_search,
)
from tileauto.space import product


def drain(strategy: SearchStrategy, n: int) -> list[list[int]]:
    strategy.start(product(x=list(range(n))))
    rounds = []
    while picks := strategy.ask():
        rounds.append(picks)
    return rounds


def test_exhaustive_proposes_every_config_once_in_order():
    assert drain(Exhaustive(), 5) == [[0, 1, 2, 3, 4]]
    assert drain(Exhaustive(), 5) == [[0, 1, 2, 3, 4]]  # start() resets


def test_random_search_is_seeded_bounded_and_split_in_rounds():
    once = drain(RandomSearch(budget=4, seed=3), 10)
    assert once == drain(RandomSearch(budget=4, seed=3), 10)
    assert len(once) == 1 and len(once[0]) == 4 and len(set(once[0])) == 4
    assert drain(RandomSearch(budget=4, seed=4), 10) != once
    everything = drain(RandomSearch(budget=50), 6)
    assert len(everything) == 1 and sorted(everything[0]) == [0, 1, 2, 3, 4, 5]
    rounds = drain(RandomSearch(budget=5, seed=1, rounds=2), 10)
    assert [len(r) for r in rounds] == [3, 2]
    # the same sample as the first API drew (random.Random(seed).sample), in draw order
    import random

    assert once[0] == random.Random(3).sample(range(10), 4)


@pytest.mark.parametrize("budget", [0, -1, 2.5, True])
def test_random_search_rejects_a_bad_budget(budget):
    with pytest.raises(ValueError, match="budget"):
        RandomSearch(budget=budget)


def test_describe_keeps_its_form():
    assert RandomSearch(budget=2, seed=0).describe() == "RandomSearch(budget=2, seed=0)"
    assert RandomSearch(budget=2).describe() == "RandomSearch(budget=2)"
    assert Exhaustive().describe() == "Exhaustive"


def test_resolve_search():
    assert isinstance(resolve_search(None), AutoSearch)  # the default
    assert isinstance(resolve_search("exhaustive"), Exhaustive)
    assert isinstance(resolve_search("auto"), AutoSearch)
    assert isinstance(resolve_search("guided"), GuidedSearch)
    random_search = resolve_search("random")
    assert isinstance(random_search, RandomSearch) and random_search.budget is None
    rs = RandomSearch(2)
    assert resolve_search(rs) is rs
    with pytest.raises(TypeError, match="SearchStrategy") as info:
        resolve_search("bayesian")
    assert "'auto'" in str(info.value) and "'guided'" in str(info.value)
    with pytest.raises(TypeError, match="SearchStrategy"):
        resolve_search(42)


class Halves(SearchStrategy):
    """A custom strategy: the even indices, then the odd ones, learning from each trial told."""

    def start(self, space, *, parallelism=1, seed=0):
        super().start(space, parallelism=parallelism, seed=seed)
        n = len(self.space)
        self.seen: list[int] = []
        self.rounds = [list(range(0, n, 2)), list(range(1, n, 2))]

    def ask(self):
        return self.rounds.pop(0) if self.rounds else []

    def tell(self, index, trial):
        self.seen.append(index)

    def describe(self):
        return "Halves()"


class Duck:
    """Not a SearchStrategy: the interface by duck typing (start, ask, tell, describe)."""

    def start(self, space, *, parallelism=1, seed=0):
        self.left = list(range(len(space)))

    def ask(self):
        out, self.left = self.left[:2], self.left[2:]
        return out

    def tell(self, index, trial):
        pass

    def describe(self):
        return "Duck()"


@pytest.mark.parametrize("make", [Halves, Duck])
def test_a_custom_strategy_runs_in_the_loop_as_it_is(make):
    inner = make()
    strategy = resolve_search(inner)
    assert strategy is inner
    space = product(x=list(range(6)))

    def measure(indices):
        return [(i, Trial(i, {}, TrialStatus.COMPILE_ERROR)) for i in indices]

    out = run_search(strategy, space, measure)
    assert sorted(out.trials) == list(range(6)) and out.never_tried == 0
    if make is Halves:
        assert inner.seen == [0, 2, 4, 1, 3, 5]
        assert strategy.describe() == "Halves()"


class Unfinished(SearchStrategy):
    """A strategy that forgot ask()."""


def test_a_strategy_without_ask_names_what_it_must_implement():
    strategy = resolve_search(Unfinished())
    with pytest.raises(NotImplementedError, match=r"Unfinished must implement ask\(\)"):
        run_search(strategy, product(x=[1, 2]), lambda indices: [])
