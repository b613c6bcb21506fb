"""Search strategies as pure functions: proposals, rounds, seeds, and bad arguments."""

from __future__ import annotations

import pytest

from tileauto.search import Exhaustive, RandomSearch, SearchStrategy, resolve_search


def drain(strategy: SearchStrategy, n: int) -> list[list[int]]:
    strategy.start(n)
    rounds = []
    while picks := strategy.propose():
        strategy.observe({})
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
    assert drain(RandomSearch(budget=50), 6) == [[0, 1, 2, 3, 4, 5]]
    rounds = drain(RandomSearch(budget=5, seed=1, rounds=2), 10)
    assert [len(r) for r in rounds] == [3, 2]


@pytest.mark.parametrize("budget", [0, -1, 2.5, True])
def test_random_search_rejects_a_bad_budget(budget):
    with pytest.raises(ValueError, match="budget"):
        RandomSearch(budget=budget)


def test_resolve_search():
    assert isinstance(resolve_search(None), Exhaustive)
    assert isinstance(resolve_search("exhaustive"), Exhaustive)
    rs = RandomSearch(2)
    assert resolve_search(rs) is rs
    with pytest.raises(TypeError, match="SearchStrategy"):
        resolve_search("bayesian")
