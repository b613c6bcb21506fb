"""The strategy contract, checked for every strategy: batches, no repeats, only configs of the
space, determinism for a seed, and a restart with start()."""

from __future__ import annotations

import importlib.util

import pytest
from search_fakes import bowl, failed_trial, ok_trial

from tileauto.search import (
    AutoSearch,
    Exhaustive,
    GuidedSearch,
    OptunaSearch,
    RandomSearch,
    SearchStrategy,
)
from tileauto.search.strategies import EXHAUSTIVE_BATCH
from tileauto.space import product

# the Optuna baseline needs optuna (in the dev extra, not in the search extra)
HAVE_OPTUNA = importlib.util.find_spec("optuna") is not None
STRATEGIES = {
    "exhaustive": Exhaustive,
    "random": RandomSearch,
    "random-budget": lambda: RandomSearch(budget=50, rounds=3),
    "guided": lambda: GuidedSearch(budget=120),
    "auto": lambda: AutoSearch(budget=60),
    **({"tpe": lambda: OptunaSearch("tpe", budget=40)} if HAVE_OPTUNA else {}),
}


def drive(strategy: SearchStrategy, space, latency, *, seed=0, parallelism=4, limit=10_000):
    """Ask and tell until the strategy is done; the batches it proposed."""
    strategy.start(space, parallelism=parallelism, seed=seed)
    batches, seen = [], set()
    while len(seen) < limit and (batch := strategy.ask()):
        batches.append(batch)
        for i in batch:
            seen.add(i)
            value = latency(space.config(i))
            strategy.tell(i, failed_trial(i) if value is None else ok_trial(i, value))
    return batches


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_no_repeats_only_configs_of_the_space(name):
    space, latency = bowl()
    batches = drive(STRATEGIES[name](), space, latency)
    every = [i for b in batches for i in b]
    assert len(every) == len(set(every)), "a config was proposed twice"
    assert all(isinstance(i, int) and 0 <= i < len(space) for i in every)
    assert all(space.config(i)["block_M"] % space.config(i)["micro"] == 0 for i in every)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_the_same_seed_proposes_the_same_and_start_resets(name):
    space, latency = bowl()
    strategy = STRATEGIES[name]()
    first = drive(strategy, space, latency, seed=3)
    assert drive(strategy, space, latency, seed=3) == first
    assert drive(STRATEGIES[name](), space, latency, seed=3) == first
    if name != "exhaustive":
        assert drive(STRATEGIES[name](), space, latency, seed=4) != first


@pytest.mark.parametrize("name", ["random", "guided", *(["tpe"] if HAVE_OPTUNA else [])])
def test_batches_keep_the_workers_busy(name):
    space, latency = bowl()
    for parallelism in (2, 12):
        batches = drive(STRATEGIES[name](), space, latency, parallelism=parallelism, limit=60)
        assert all(len(b) >= min(parallelism, 8) for b in batches[:-1])
        assert len(batches[0]) == max(parallelism, 8)


def test_exhaustive_proposes_everything_in_one_batch_in_order():
    space = product(a=[1, 2, 3], b=[1, 2], constraints="a != b")
    assert drive(Exhaustive(), space, lambda c: 1.0) == [[0, 1, 2, 3]]


def test_exhaustive_proposes_a_large_space_in_order_a_batch_at_a_time():
    space = product(a=list(range(1000)), b=list(range(200)))  # 200,000 configs
    batches = drive(Exhaustive(), space, lambda c: 1.0, limit=len(space))
    assert [i for b in batches for i in b] == list(range(len(space)))
    assert len(batches) > 1 and all(len(b) <= EXHAUSTIVE_BATCH for b in batches)


def test_exhaustive_under_max_trials_never_lists_a_huge_space():
    from tileauto.search import run_search

    space = product(**{f"p{k}": list(range(10)) for k in range(12)}, q=[1, 2, 3, 4])  # 4 x 10^12
    out = run_search(
        Exhaustive(), space, lambda idx: [(i, ok_trial(i, 1.0)) for i in idx], max_trials=5
    )
    assert sorted(out.trials) == [0, 1, 2, 3, 4] and out.never_tried == 4 * 10**12 - 5


def test_budgets_bound_the_proposals():
    space, latency = bowl()
    for make, budget in (
        (lambda: RandomSearch(budget=50, rounds=3), 50),
        (lambda: GuidedSearch(budget=37), 37),
        *([(lambda: OptunaSearch(budget=21), 21)] if HAVE_OPTUNA else []),
    ):
        assert sum(map(len, drive(make(), space, latency))) == budget


def test_a_random_prefix_is_a_uniform_sample_not_the_start_of_the_space():
    space = product(x=list(range(1000)))
    first = drive(RandomSearch(budget=100), space, lambda c: 1.0)[0][:20]
    assert max(first) > 200  # sorted picks would be the 20 lowest of 100 draws


def test_a_small_space_is_exhausted_by_every_strategy():
    space = product(a=[1, 2, 3], b=["x", "y"])
    for make in (Exhaustive, RandomSearch, GuidedSearch, *([OptunaSearch] if HAVE_OPTUNA else [])):
        batches = drive(make(), space, lambda c: float(c["a"]))
        assert sorted(i for b in batches for i in b) == list(range(6))


def test_auto_under_max_trials_guides_any_space_with_that_budget():
    pytest.importorskip("sklearn", reason="the guided search needs the search extra")
    from tileauto.search import run_search
    from tileauto.search.guided import GuidedSearch
    from tileauto.search.resolve import AutoSearch
    from tileauto.space import product

    space = product(a=list(range(10)), b=list(range(10)))  # 100 configs: exhaustive by size
    seen = []

    def measure(indices):
        seen.append(list(indices))
        for i in indices:
            yield i, ok_trial(i, 1.0 + i)

    bounded = AutoSearch().within(12)
    out = run_search(AutoSearch(), space, measure, max_trials=12, seed=0)
    assert len(out.trials) == 12 and sorted(out.trials) != list(range(12))  # a sample, not a prefix
    bounded.start(space, parallelism=2, seed=0)
    assert isinstance(bounded.inner, GuidedSearch) and bounded.inner.budget == 12
    whole = AutoSearch().within(500)
    whole.start(space, seed=0)
    assert whole.inner.describe() == "Exhaustive"  # max_trials covers the space
    own = AutoSearch(budget=30)
    assert own.within(12) is own  # a budget of its own is kept (the loop still stops at 12)
