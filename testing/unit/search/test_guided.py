"""GuidedSearch: it learns where the fast configs are, avoids failing ones, and scales."""

from __future__ import annotations

import sys

import pytest
from search_fakes import bowl, lookup

from tileauto.search import (
    AutoSearch,
    GuidedSearch,
    RandomSearch,
    resolve_search,
    run_search,
)
from tileauto.search.resolve import AUTO_EXHAUSTIVE_MAX, auto_budget
from tileauto.space import ListSpace, product


def best_after(strategy, space, latency, trials, seed):
    out = run_search(strategy, space, lookup(space, latency), max_trials=trials, seed=seed)
    return min(t.latency_ms for t in out.trials.values() if t.ok), out


def test_guided_finds_the_optimum_with_few_trials_where_random_does_not():
    space, latency = bowl()
    optimum = min(v for v in map(latency, space) if v is not None)
    found = [best_after(GuidedSearch(), space, latency, 100, s)[0] for s in range(3)]
    sampled = [best_after(RandomSearch(), space, latency, 100, s)[0] for s in range(3)]
    assert all(f == optimum for f in found), (found, optimum)
    assert all(s > optimum for s in sampled)


def test_guided_learns_to_avoid_configs_that_fail():
    space, latency = bowl()
    failing = sum(latency(c) is None for c in space) / len(space)
    later = []
    for seed in range(3):
        _, out = best_after(GuidedSearch(), space, latency, 160, seed)
        later += [t for i, t in out.trials.items()][40:]
    assert sum(not t.ok for t in later) / len(later) < failing / 2


def test_a_space_larger_than_the_pool_samples_candidates_and_neighbours():
    space = product(
        a=list(range(40)),
        b=list(range(40)),
        c=[1, 2, 4, 8],
        constraints="(a + b) % 3 != 0",
    )

    def latency(c):
        return 1.0 + abs(c["a"] - 31) + abs(c["b"] - 7) + abs(c["c"] - 4)

    strategy = GuidedSearch(pool=300)
    best, out = best_after(strategy, space, latency, 150, 1)
    assert len(space) > 4000 and best <= 3.0
    assert len(set(out.trials)) == len(out.trials)


def test_a_space_without_parameters_is_sampled_at_random():
    strategy = GuidedSearch()
    strategy.start(ListSpace([{}] * 50), parallelism=4, seed=0)  # 50 configs of no parameter
    assert len(strategy.ask()) == 8


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget": 0},
        {"batch": 1.5},
        {"good_fraction": 1.0},
        {"explore": -0.1},
        {"pool": 10},
        {"local": -1},
        {"stall": 1.5},
    ],
)
def test_bad_settings_are_named(kwargs):
    with pytest.raises(ValueError, match="GuidedSearch"):
        GuidedSearch(**kwargs)


def test_describe_is_stable_and_names_the_settings():
    assert GuidedSearch(64).describe() == GuidedSearch(64).describe()
    assert "budget=64" in GuidedSearch(64).describe()
    assert GuidedSearch(64).describe() != GuidedSearch(64, trees=10).describe()
    assert GuidedSearch(64).describe() != GuidedSearch(64, local=0, stall=0).describe()


def test_without_scikit_learn_guided_fails_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ImportError, match=r"tileauto\[search\]"):
        resolve_search("guided")
    with pytest.raises(ImportError, match=r"tileauto\[search\]"):
        GuidedSearch().start(product(a=[1, 2]))


def test_without_scikit_learn_auto_samples_at_random_after_one_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setattr(AutoSearch, "warned", False)
    space = product(a=list(range(AUTO_EXHAUSTIVE_MAX + 1)))
    with pytest.warns(UserWarning, match=r"tileauto\[search\]"):
        AutoSearch().start(space)
    strategy = AutoSearch()
    strategy.start(space)  # no second warning
    assert isinstance(strategy.inner, RandomSearch)
    assert strategy.inner.budget == auto_budget(len(space))


def test_auto_is_exhaustive_up_to_the_size_and_guided_above():
    small = AutoSearch()
    small.start(product(a=list(range(AUTO_EXHAUSTIVE_MAX))))
    assert small.ask() == list(range(AUTO_EXHAUSTIVE_MAX))
    big = AutoSearch()
    big.start(product(a=list(range(100)), b=list(range(100))))
    assert isinstance(big.inner, GuidedSearch) and big.inner.budget == 500
    assert auto_budget(300) == AUTO_EXHAUSTIVE_MAX and auto_budget(100) == 100
