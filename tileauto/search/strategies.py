"""The strategies that learn nothing: every config in order, or a seeded random sample."""

from __future__ import annotations

import numbers
import random

from tileauto.records import Trial
from tileauto.search._sampling import Untried
from tileauto.search.base import SearchStrategy, SpaceLike, _started

EXHAUSTIVE_BATCH = 1 << 16  # the most indices Exhaustive proposes at once (never the whole space)


class Exhaustive(SearchStrategy):
    """Every config, in the order of the space: in one batch up to :data:`EXHAUSTIVE_BATCH`
    configs (TileLang's behaviour), in batches of that size above it, so that a budget on a
    huge space measures its first configs without listing the rest."""

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        super().start(space, parallelism=parallelism, seed=seed)
        self._next = 0

    def ask(self) -> list[int]:
        _started(self, "_next", "ask")
        stop = self.space.count_upto(self._next + EXHAUSTIVE_BATCH)  # no count past it
        batch = list(range(self._next, stop))
        self._next = stop
        return batch

    def describe(self) -> str:
        return "Exhaustive"


class RandomSearch(SearchStrategy):
    """Configs drawn uniformly at random, without repeats.

    Args:
        budget: how many configs to propose in all (all of them when the space is smaller);
            None: keep proposing until the space is exhausted or the loop's budget stops it.
        seed: the draw is the same for the same seed and space size; None: the seed the
            search is started with.
        rounds: with a budget, how many batches to propose it in (1: all at once). Without
            one, batches keep the compile workers busy (``max(parallelism, 8)`` configs).

    Any prefix of the proposals is itself a uniform sample, so a budget that stops the search
    early leaves an unbiased sample.
    """

    def __init__(self, budget: int | None = None, seed: int | None = None, rounds: int = 1) -> None:
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1
        ):
            raise ValueError(f"RandomSearch budget must be an int >= 1 or None, got {budget!r}")
        if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
            raise ValueError(f"RandomSearch rounds must be an int >= 1, got {rounds!r}")
        self.budget: int | None = None if budget is None else int(budget)
        self.own_seed: int | None = seed
        self.rounds: int = int(rounds)

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        super().start(space, parallelism=parallelism, seed=seed)
        n = len(self.space)
        rng = random.Random(self.own_seed if self.own_seed is not None else self.seed)
        self._queue: list[list[int]] = []
        self._untried: Untried | None = None
        if self.budget is not None:
            picks = rng.sample(range(n), min(self.budget, n))  # a range is sampled lazily
            size = max(1, -(-len(picks) // self.rounds))
            self._queue = [picks[i : i + size] for i in range(0, len(picks), size)]
        else:
            self._untried = Untried(n, rng)

    def ask(self) -> list[int]:
        _started(self, "_queue", "ask")
        if self._untried is not None:
            return self._untried.draw(max(self.parallelism, 8))
        return self._queue.pop(0) if self._queue else []

    def tell(self, index: int, trial: Trial) -> None:
        if self._untried is not None:
            self._untried.mark([index])

    def describe(self) -> str:
        seed = "" if self.own_seed is None else f", seed={self.own_seed}"
        return f"RandomSearch(budget={self.budget}{seed})"
