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

SpaceLike: TypeAlias = "Space | Sequence[dict[str, Any]]"  # what start() takes


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
    """

    space: Space
    parallelism: int
    seed: int

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        """Begin a search of ``space`` (a :class:`~tileauto.space.Space` or a list of configs)."""
        self.space = as_space(space)
        self.parallelism = max(1, int(parallelism))
        self.seed = int(seed)

    def ask(self) -> list[int]:
        """The next batch of indices to measure ([] when there is nothing more to propose)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement ask() (and tell(index, trial) to learn)"
        )

    def tell(self, index: int, trial: Trial) -> None:
        """One measured config (the default strategies learn nothing from it)."""

    def describe(self) -> str:
        """A stable text of the settings (part of the cache key)."""
        return type(self).__name__


def _started(strategy: Any, attribute: str, method: str) -> None:
    """Raise, naming the strategy and ``method``, when :meth:`SearchStrategy.start` has not
    set ``attribute`` yet (an ask or tell before start)."""
    if not hasattr(strategy, attribute):
        raise RuntimeError(
            f"{type(strategy).__name__}.{method}() before start(): call "
            "start(space, parallelism=..., seed=...) first"
        )
