"""Search: which configs of a space to measure, proposed in batches (ask/tell).

A strategy never builds, runs or reads files: :func:`run_search` asks it for indices of the
space, has them measured, and tells it each trial; the tuning session and :func:`replay` both
drive strategies through that one loop. Configs never proposed are reported as never tried.

    base.py            SearchStrategy: the contract (start, ask, tell, describe)
    strategies.py      Exhaustive (every config, in order) and RandomSearch (a seeded sample)
    guided.py          GuidedSearch: random forests of good and of failing configs (scikit-learn)
    optuna_sampler.py  OptunaSearch: Optuna's TPE alone, the baseline (needs optuna)
    baselines.py       GeneticSearch and ParticleSwarm: Kernel Tuner's strategies, baselines
    prior.py           priors: records of the same kernel elsewhere, matched to a space
    _features.py       configs as rows of numbers for the guided search's models
    _sampling.py       the untried configs of a space, and uniform draws among them
    resolve.py         resolve_search (names to strategies) and AutoSearch, the default
    loop.py            run_search: ask, measure, tell, stop on a budget
    recorded.py        RecordedSpace: a space measured before, loaded from a file
    replay.py          replay: a strategy scored on a recorded space, nothing compiled
"""

from tileauto.search.base import SearchStrategy
from tileauto.search.baselines import GeneticSearch, ParticleSwarm
from tileauto.search.guided import GuidedSearch
from tileauto.search.loop import SearchOutcome, StopReason, run_search
from tileauto.search.optuna_sampler import OptunaSearch
from tileauto.search.prior import SameProblem
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
    "GeneticSearch",
    "GuidedSearch",
    "OptunaSearch",
    "ParticleSwarm",
    "RandomSearch",
    "RecordedSpace",
    "ReplayResult",
    "SameProblem",
    "SearchOutcome",
    "SearchStrategy",
    "StopReason",
    "auto_budget",
    "replay",
    "resolve_search",
    "run_search",
]
