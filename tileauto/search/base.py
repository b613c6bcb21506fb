"""The strategy contract: a strategy proposes indices of a space and is told their trials.

A strategy never builds, runs, times or reads files. The loop (:func:`tileauto.search.run_search`)
starts it on a space, asks it for a batch of indices, measures them, tells it every trial
(failures included), and asks again, until the strategy has nothing more to propose or a budget
runs out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from tileauto.records import Trial
from tileauto.space import Space, as_space

SpaceLike: TypeAlias = "Space | Sequence[dict[str, Any]] | int"  # what start() takes


class SearchStrategy:
    """Base class of the search strategies. Contract:

    - ``start(space, *, parallelism, seed)`` is called once, before anything else, with the
      space (a :class:`tileauto.space.Space`), how many configs can be measured at once, and
      the seed; it resets the strategy, so one object can search several times.
    - ``ask()`` returns indices of configs not proposed before, a batch big enough to keep
      ``parallelism`` compile workers busy; ``[]`` means it has nothing more to propose.
    - ``tell(index, trial)`` is called for each measured config, failures included (a
      :class:`tileauto.records.Trial`: ``ok``, ``status``, ``latency_ms``...). An index told
      without having been asked (measured before) counts as tried too.
    - ``describe()`` is a stable text of the strategy's settings (part of the cache key).

    Strategies written for the first interface (``start(n)``, ``propose()``,
    ``observe({index: trial})``) keep working: :func:`tileauto.search.resolve_search` wraps
    them in :class:`LegacyStrategy`, and the old names still work on these classes.
    """

    space: Space
    n: int
    parallelism: int
    seed: int

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        """Begin a search of ``space`` (an int ``n`` stands for ``n`` configs of no parameter)."""
        self.space = _as_space(space)
        self.n = len(self.space)  # the first interface's name for the size
        self.parallelism = max(1, int(parallelism))
        self.seed = int(seed)

    def ask(self) -> list[int]:
        """The next batch of indices to measure ([] when there is nothing more to propose)."""
        raise NotImplementedError

    def tell(self, index: int, trial: Trial) -> None:
        """One measured config (the default strategies learn nothing from it)."""

    def describe(self) -> str:
        """A stable text of the settings (part of the cache key)."""
        return type(self).__name__

    # -- the first interface, kept for callers that still use it -----------------------------------
    def propose(self) -> list[int]:
        """Old name of :meth:`ask`."""
        return self.ask()

    def observe(self, trials: dict[int, Trial]) -> None:
        """Old form of :meth:`tell`: every trial of the last batch at once."""
        for index, trial in trials.items():
            self.tell(index, trial)


class LegacyStrategy(SearchStrategy):
    """A strategy of the first interface (``start(n)``, ``propose()``, ``observe(trials)``)
    driven through the current one: trials told one by one are handed over as one dict
    before the next proposal."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._told: dict[int, Trial] = {}

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        super().start(space, parallelism=parallelism, seed=seed)
        self._told = {}
        self.inner.start(len(self.space))

    def ask(self) -> list[int]:
        if self._told:
            told, self._told = self._told, {}
            self.inner.observe(told)
        return [int(i) for i in self.inner.propose()]

    def tell(self, index: int, trial: Trial) -> None:
        self._told[index] = trial

    def describe(self) -> str:
        describe = getattr(self.inner, "describe", None)
        return describe() if callable(describe) else type(self.inner).__name__


def is_legacy(strategy: Any) -> bool:
    """Whether ``strategy`` speaks only the first interface (propose/observe, no ask/tell)."""
    kind = type(strategy)
    if isinstance(strategy, SearchStrategy):
        return kind.ask is SearchStrategy.ask and kind.propose is not SearchStrategy.propose
    return callable(getattr(strategy, "propose", None)) and not callable(
        getattr(strategy, "ask", None)
    )


class _Indices(Space):
    """``n`` configs with no parameter (the space of a strategy started with an int)."""

    def __init__(self, n: int) -> None:
        self._n = n
        self.params = ()

    def __len__(self) -> int:
        return self._n

    def config(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self._n:
            raise IndexError(f"config index {index} out of range for {self._n}")
        return {}

    def codes(self, indices: Any) -> Any:
        import numpy as np

        return np.zeros((len(indices), 0), dtype=np.int64)

    def index_of(self, codes: Any) -> Any:
        import numpy as np

        return np.full(len(codes), -1, dtype=np.int64)


def _as_space(space: SpaceLike) -> Space:
    if isinstance(space, bool):
        raise TypeError("start() takes a Space, a list of configs, or a number of configs")
    if isinstance(space, int):
        if space < 0:
            raise ValueError(f"a space has at least 0 configs, got {space}")
        return _Indices(space)
    return as_space(space)
