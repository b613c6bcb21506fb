"""Search strategies: which configs of the space to measure, proposed in rounds (ask/tell).

A strategy never builds, runs or reads files: the tuner asks it for indices into the space,
measures them, and tells it the trials. Configs it never proposes are reported as not run.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tileauto.records import Trial


class SearchStrategy:
    """Base class. Contract:

    - ``start(n)`` is called once with the size of the space (unique configs, in order);
    - ``propose()`` returns indices not proposed before (an empty list ends the search);
    - ``observe(trials)`` receives the trial of every index of the last proposal.
    """

    def start(self, n: int) -> None:
        self.n = n

    def propose(self) -> list[int]:
        raise NotImplementedError

    def observe(self, trials: dict[int, Trial]) -> None:
        """Learn from measured trials (the default strategies need nothing)."""

    def describe(self) -> str:
        return type(self).__name__


class Exhaustive(SearchStrategy):
    """Every config, in the order of the space, in one round (TileLang's behaviour)."""

    def start(self, n: int) -> None:
        super().start(n)
        self._done = False

    def propose(self) -> list[int]:
        if self._done:
            return []
        self._done = True
        return list(range(self.n))


class RandomSearch(SearchStrategy):
    """A seeded random sample of ``budget`` configs (all of them when the space is smaller).

    Args:
        budget: how many configs to measure (besides the default config).
        seed: the sample is the same for the same seed and space size.
        rounds: how many rounds to propose them in (later rounds can be stopped early by a
            subclass that observes the trials).
    """

    def __init__(self, budget: int, seed: int = 0, rounds: int = 1) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"RandomSearch budget must be an int >= 1, got {budget!r}")
        if not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"RandomSearch rounds must be an int >= 1, got {rounds!r}")
        self.budget, self.seed, self.rounds = budget, seed, rounds

    def start(self, n: int) -> None:
        super().start(n)
        picks = sorted(random.Random(self.seed).sample(range(n), min(self.budget, n)))
        size = -(-len(picks) // self.rounds)
        self._queue = [picks[i : i + size] for i in range(0, len(picks), size)]

    def propose(self) -> list[int]:
        return self._queue.pop(0) if self._queue else []

    def describe(self) -> str:
        return f"RandomSearch(budget={self.budget}, seed={self.seed})"


def resolve_search(search: SearchStrategy | str | None) -> SearchStrategy:
    """``None`` or ``"exhaustive"`` -> Exhaustive; a SearchStrategy instance as it is."""
    if search is None or search == "exhaustive":
        return Exhaustive()
    if isinstance(search, SearchStrategy):
        return search
    raise TypeError(
        f"search must be 'exhaustive' or a tileauto.search.SearchStrategy "
        f"(e.g. RandomSearch(budget=8)), got {search!r}"
    )


def not_proposed(indices: Sequence[int], proposed: set[int]) -> list[int]:
    """The indices a strategy never proposed."""
    return [i for i in indices if i not in proposed]
