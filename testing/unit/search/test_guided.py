"""GuidedSearch: it learns where the fast configs are, avoids failing ones, and scales."""

from __future__ import annotations

import sys

import pytest
from search_fakes import bowl, failed_trial, lookup, ok_trial

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


def test_the_parzen_slots_take_the_values_the_good_configs_share():
    # the good configs all have a=3 (b varies); the others, and the failed ones, do not
    space = product(a=list(range(10)), b=list(range(20)))
    strategy = GuidedSearch(parzen=8, local=0, explore=0.0, good_fraction=0.1, stall=0)
    strategy.start(space, parallelism=8, seed=0)
    told = [i for i in range(len(space)) if space.config(i)["a"] == 3][:6]
    others = [i for i in range(len(space)) if space.config(i)["a"] != 3][::6][:30]
    for k, i in enumerate(told):
        strategy.tell(i, ok_trial(i, 1.0 + 0.01 * k))
    for k, i in enumerate(others):
        strategy.tell(i, failed_trial(i) if k % 5 == 0 else ok_trial(i, 10.0 + k))
    picks = strategy.ask()
    assert len(picks) == 8 and not set(picks) & set(told + others)
    assert [space.config(i)["a"] for i in picks] == [3] * 8


def test_the_parzen_slots_find_the_optimum_beside_the_forest():
    space, latency = bowl()
    optimum = min(v for v in map(latency, space) if v is not None)
    found = [best_after(GuidedSearch(parzen=3), space, latency, 100, s)[0] for s in range(3)]
    assert all(f == optimum for f in found), (found, optimum)


def test_a_space_without_parameters_is_sampled_at_random():
    strategy = GuidedSearch()
    strategy.start(ListSpace([{}] * 50), parallelism=4, seed=0)  # 50 configs of no parameter
    assert len(strategy.ask()) == 8


@pytest.mark.parametrize(
    ("step_out", "stepped"),
    # the batches after the first (random) one that step out of the basin, stuck from the
    # start: "once" one batch in stall + 1, "stay" every batch from the stall-th on
    [("once", [2, 5, 8]), ("stay", [2, 3, 4, 5, 6, 7, 8, 9])],
)
def test_a_stuck_search_steps_out_once_or_stays_out(step_out, stepped):
    space = product(a=list(range(8)), b=list(range(8)), c=list(range(8)))
    strategy = GuidedSearch(step_out=step_out)
    strategy.start(space, parallelism=8, seed=0)
    first = strategy.ask()
    for rank, index in enumerate(first):  # the first batch holds the best config there is
        strategy.tell(index, ok_trial(index, 1.0 + rank))
    seen = []
    for batch in range(10):
        before = strategy._stepped
        for index in strategy.ask():
            strategy.tell(index, ok_trial(index, 10.0 + index))  # never better
        if strategy._stepped != before:
            seen.append(batch)
    assert seen == stepped


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
        {"step_out": "never"},
        {"parzen": -1},
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
    assert "parzen=3" in GuidedSearch(64, parzen=3).describe()
    assert "step_out='stay'" in GuidedSearch(64, step_out="stay").describe()
    assert "step_out" not in GuidedSearch(64).describe()


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


def test_the_forest_scores_as_scikit_learns_random_forest():
    # regression trees of the 0/1 label split as the classifier's Gini trees: unweighted, the
    # same P(True) to the last digit; weighted, the same but for ties between equal splits
    np = pytest.importorskip("numpy")
    ensemble = pytest.importorskip("sklearn.ensemble")
    from tileauto.search._forest import Forest

    rng = np.random.default_rng(1)
    x = rng.integers(0, 8, size=(200, 12)).astype(np.float32)
    y = x[:, 0] + x[:, 5] * rng.random(200) > 6
    weight = rng.random(200) + 0.1
    test = rng.integers(0, 8, size=(500, 12)).astype(np.float32)
    for sample_weight, tolerance in ((None, 1e-12), (weight, 0.05)):
        ours = Forest(20, 7).fit(x, y, sample_weight=sample_weight).predict_proba(test)
        forest = ensemble.RandomForestClassifier(20, max_features=0.3, random_state=7)
        theirs = forest.fit(x, y, sample_weight=sample_weight).predict_proba(test)
        assert np.abs(ours - theirs).mean() < tolerance
