"""An Optuna sampler driven alone over a space: the library baseline the guided search is
measured against (``bench/search_quality.py``), usable as a strategy of its own.

It is used as a user would use the library: one categorical distribution per parameter (its
values), the sampler asked for a batch before any result is told (no constant liar), failed
configs told as failed. It knows nothing of the constraints, so it proposes configs that are not
in the space: each is told back at once with a penalty value (twice the worst latency seen),
which costs no trial (a constraint check is free); after ``retries`` such proposals or repeats
in a row, a slot is filled with a random untried config. Telling those configs as *failed*
instead (Optuna's own notion) makes TPE propose them again and again (``docs/search.md``).
"""

from __future__ import annotations

import math
import numbers
import random
from typing import Any

from tileauto.records import Trial
from tileauto.search._sampling import Untried
from tileauto.search.base import SearchStrategy, SpaceLike, _started

SAMPLERS = ("tpe", "random")


class OptunaSearch(SearchStrategy):
    """Optuna's sampler (TPE by default) over the product of the parameters' values.

    Args:
        sampler: ``"tpe"`` (``optuna.samplers.TPESampler``, default settings) or ``"random"``.
        budget: how many configs to propose in all; None: until the loop stops it.
        batch: configs per batch; None: ``max(parallelism, 8)``.
        retries: proposals outside the space (or repeats) per slot before a random fill.
        multivariate: TPE models the parameters jointly (``TPESampler(multivariate=True)``).
        constant_liar: TPE counts the configs of a batch still being measured as bad ones
            (``constant_liar=True``), so that one batch does not repeat one idea.
    """

    def __init__(
        self,
        sampler: str = "tpe",
        budget: int | None = None,
        *,
        batch: int | None = None,
        retries: int = 16,
        multivariate: bool = False,
        constant_liar: bool = False,
    ) -> None:
        if sampler not in SAMPLERS:
            raise ValueError(f"OptunaSearch sampler must be one of {SAMPLERS}, got {sampler!r}")
        for name, value in (("budget", budget), ("batch", batch)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1
            ):
                raise ValueError(f"OptunaSearch {name} must be an int >= 1 or None, got {value!r}")
        if isinstance(retries, bool) or not isinstance(retries, numbers.Integral) or retries < 0:
            raise ValueError(f"OptunaSearch retries must be an int >= 0, got {retries!r}")
        self.sampler: str = sampler
        self.budget: int | None = None if budget is None else int(budget)
        self.batch: int | None = None if batch is None else int(batch)
        self.retries: int = int(retries)
        self.multivariate: bool = bool(multivariate)
        self.constant_liar: bool = bool(constant_liar)

    def describe(self) -> str:
        extra = "".join(
            f", {name}=True"
            for name in ("multivariate", "constant_liar")
            if getattr(self, name) and self.sampler == "tpe"
        )
        return f"OptunaSearch({self.sampler!r}, budget={self.budget}, batch={self.batch}{extra})"

    def start(self, space: SpaceLike, *, parallelism: int = 1, seed: int = 0) -> None:
        try:
            import optuna
        except ImportError:
            raise ImportError(
                "OptunaSearch needs optuna, which is not installed: pip install optuna"
            ) from None
        super().start(space, parallelism=parallelism, seed=seed)
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        if self.sampler == "tpe":
            sampler: Any = optuna.samplers.TPESampler(
                seed=self.seed,
                multivariate=self.multivariate,
                constant_liar=self.constant_liar,
            )
        else:
            sampler = optuna.samplers.RandomSampler(seed=self.seed)
        self._study = optuna.create_study(sampler=sampler)
        self._dists: dict[str, Any] = {
            f"p{j}": optuna.distributions.CategoricalDistribution(list(range(len(p.values))))
            for j, p in enumerate(self.space.params)
        }
        self._fail = optuna.trial.TrialState.FAIL
        self._untried = Untried(len(self.space), random.Random(self.seed))
        self._open: dict[int, Any] = {}
        self._latency: dict[int, float] = {}
        self._worst = 0.0
        self._asked = 0
        self.outside = 0  # proposals that were not configs of the space
        self.filled = 0  # slots filled at random after too many of them

    def ask(self) -> list[int]:
        _started(self, "_untried", "ask")
        import numpy as np

        k = min(self.batch or max(self.parallelism, 8), self._untried.left)
        if self.budget is not None:
            k = min(k, self.budget - self._asked)
        picks: list[int] = []
        tries = 0
        while len(picks) < k and tries < self.retries * k:
            tries += 1
            trial = self._study.ask(self._dists)
            codes = np.asarray([[trial.params[name] for name in self._dists]], dtype=np.int64)
            index = int(self.space.index_of(codes)[0])
            if index < 0 or self._untried.tried(index) or index in picks:
                self.outside += index < 0
                self._answer(
                    trial, self._latency.get(index) if index >= 0 else None, penalty=index < 0
                )
                continue
            picks.append(index)
            self._untried.mark([index])
            self._open[index] = trial
        if len(picks) < k:
            fill = self._untried.draw(k - len(picks))
            self.filled += len(fill)
            picks += fill
        self._asked += len(picks)
        return picks

    def tell(self, index: int, trial: Trial) -> None:
        _started(self, "_untried", "tell")
        self._untried.mark([index])
        latency = trial.latency_ms if trial.ok else None
        if latency is not None and math.isfinite(latency):
            self._latency[index] = latency
            self._worst = max(self._worst, latency)
        opened = self._open.pop(index, None)
        if opened is not None:
            self._answer(opened, self._latency.get(index), penalty=False)

    def _answer(self, trial: Any, latency: float | None, *, penalty: bool) -> None:
        if latency is not None:
            self._study.tell(trial, latency)
        elif penalty and self._worst > 0:
            self._study.tell(trial, 2 * self._worst)
        else:
            self._study.tell(trial, state=self._fail)
