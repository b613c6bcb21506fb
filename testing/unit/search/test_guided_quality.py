"""GuidedSearch's local search and its escape from an exhausted basin."""

from __future__ import annotations

from search_fakes import bowl, lookup

from tileauto.search import GuidedSearch, RandomSearch, run_search
from tileauto.space import product


class Batches(GuidedSearch):
    """GuidedSearch that keeps each batch and the best config known when it was asked."""

    def start(self, space, *, parallelism=1, seed=0):  # type: ignore[no-untyped-def]
        super().start(space, parallelism=parallelism, seed=seed)
        self.batches: list[tuple[int | None, list[int]]] = []
        self.best: tuple[float, int] | None = None

    def ask(self):  # type: ignore[no-untyped-def]
        picks = super().ask()
        self.batches.append((self.best[1] if self.best else None, picks))
        return picks

    def tell(self, index, trial):  # type: ignore[no-untyped-def]
        super().tell(index, trial)
        if trial.ok and (self.best is None or trial.latency_ms < self.best[0]):
            self.best = (trial.latency_ms, index)


def test_each_model_batch_tries_one_parameter_changes_of_the_best_config():
    space, latency = bowl()
    strategy = Batches(local=2)
    run_search(strategy, space, lookup(space, latency), max_trials=64, seed=3)
    codes = space.codes(list(range(len(space))))
    guided = strategy.batches[1:]  # the first batch is random
    assert guided
    for best, picks in guided:
        changes = [int((codes[i] != codes[best]).sum()) for i in picks]
        assert changes.count(1) >= 2, changes


def test_a_seed_gives_the_same_proposals_and_none_twice():
    space, latency = bowl()
    runs = [
        run_search(GuidedSearch(), space, lookup(space, latency), max_trials=120, seed=7)
        for _ in range(2)
    ]
    assert list(runs[0].trials) == list(runs[1].trials)
    assert len(set(runs[0].trials)) == len(runs[0].trials) == 120


def basin_and_needle():
    """A broad basin of good configs (b > 5) and a narrow, faster needle far from it."""
    space = product(a=list(range(12)), b=list(range(10)), c=[0, 1], d=[0, 1, 2, 3], e=[1, 2, 4])

    def latency(cfg):
        if cfg["c"] == 0 and cfg["d"] == 0 and cfg["a"] in (0, 1) and cfg["e"] == 4:
            return 0.5 + 0.01 * cfg["b"]  # the needle: 20 configs of 2,880
        if cfg["c"] == 0:
            return 3.0 + 0.1 * cfg["a"] + 0.1 * cfg["d"]
        return 1.0 + 0.1 * abs(cfg["b"] - 8) + 0.05 * cfg["d"] + 0.01 * cfg["a"]

    return space, latency


def test_the_search_leaves_a_broad_basin_for_a_narrow_faster_needle():
    """Found in 2 runs of 3 at least, and more often than random search with the budget.

    24 seeds, not 6: the count moves with scikit-learn's forests (seeds 0-23 found it 22
    times with scikit-learn 1.9.1, 17 with 1.3.2-1.8.0; random search 13), and 6 seeds put
    one of those versions on the line."""
    space, latency = basin_and_needle()

    def found(strategy, seed):
        out = run_search(strategy, space, lookup(space, latency), max_trials=120, seed=seed)
        return min(t.latency_ms for t in out.trials.values() if t.ok) < 0.7

    guided = sum(found(GuidedSearch(), s) for s in range(24))
    randomly = sum(found(RandomSearch(), s) for s in range(24))
    assert guided >= 16, (guided, randomly)
    assert guided >= randomly + 3, (guided, randomly)
