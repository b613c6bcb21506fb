"""Search: which configs of a space to measure, proposed in batches (ask/tell).

A strategy never builds, runs or reads files: :func:`run_search` asks it for indices of the
space, has them measured, and tells it each trial; the tuning session and :func:`replay` both
drive strategies through that one loop. Configs never proposed are reported as never tried.

- :class:`Exhaustive`: every config; :class:`RandomSearch`: a uniform sample;
  :class:`GuidedSearch`: model-guided (random forests of good and of failing configs; needs
  the ``search`` extra); :class:`AutoSearch` (``"auto"``): exhaustive up to
  :data:`AUTO_EXHAUSTIVE_MAX` configs, guided above; :class:`OptunaSearch`: Optuna's TPE
  alone, the baseline.
- :class:`RecordedSpace` and :func:`replay`: score a strategy on a space measured before.
"""

from tileauto.search.base import LegacyStrategy, SearchStrategy
from tileauto.search.guided import GuidedSearch
from tileauto.search.loop import SearchOutcome, StopReason, run_search
from tileauto.search.optuna_sampler import OptunaSearch
from tileauto.search.recorded import RecordedSpace
from tileauto.search.replay import ReplayResult, replay
from tileauto.search.resolve import (
    AUTO_EXHAUSTIVE_MAX,
    AutoSearch,
    auto_budget,
    resolve_search,
)
from tileauto.search.strategies import Exhaustive, RandomSearch

__all__ = [
    "AUTO_EXHAUSTIVE_MAX",
    "AutoSearch",
    "Exhaustive",
    "GuidedSearch",
    "LegacyStrategy",
    "OptunaSearch",
    "RandomSearch",
    "RecordedSpace",
    "ReplayResult",
    "SearchOutcome",
    "SearchStrategy",
    "StopReason",
    "auto_budget",
    "not_proposed",
    "replay",
    "resolve_search",
    "run_search",
]


def not_proposed(indices: list[int], proposed: set[int]) -> list[int]:
    """The indices a strategy never proposed."""
    return [i for i in indices if i not in proposed]
