"""A cuTile-style view of a tuning: the best config with its error margin, successes, failures.

Users of ``cuda.tile.tune.exhaustive_search`` read a ``TuningResult``; this is the same view of
an :class:`~tileauto.AutotuneResult` (``result.as_tuning_result()``), built from its trials.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tileauto.records import Trial


@dataclass(frozen=True)
class Measured:
    """One config that passed: its mean latency, the 95% error margin and the sample count."""

    config: dict[str, Any]
    mean_ms: float
    margin_ms: float
    samples: int
    median_ms: float


@dataclass(frozen=True)
class Failure:
    """One config that did not pass: its config, the kind of failure and the message."""

    config: dict[str, Any]
    kind: str
    message: str

    def __iter__(self):  # unpacks as (config, kind, message)
        return iter((self.config, self.kind, self.message))


@dataclass(frozen=True)
class TuningResult:
    """The best config, every success sorted by latency, and every failure.

    Attributes:
        best: the config the tuning picked (the fastest by its median; see the tuning guide);
            NaN times and 0 samples when it was used unmeasured (pruned to one config).
        successes: every config that passed, fastest (by median) first.
        failures: every config that failed, as ``(config, kind, message)`` records, in the
            order of the space. Configs never measured (``not_run``) are not failures and are
            left out.
    """

    best: Measured
    successes: tuple[Measured, ...]
    failures: tuple[Failure, ...]

    @classmethod
    def from_trials(cls, trials: Sequence[Trial], best_config: dict[str, Any]) -> TuningResult:
        """Build the view from a tuning's trials and the config it picked."""
        successes = tuple(
            sorted(
                (
                    Measured(
                        t.config,
                        t.latency.mean_ms,
                        t.latency.margin_ms,
                        t.latency.samples,
                        t.latency.median_ms,
                    )
                    for t in trials
                    if t.ok and t.latency is not None
                ),
                key=lambda m: m.median_ms,
            )
        )
        failures = tuple(
            Failure(t.config, t.status.value, t.error or "")
            for t in trials
            if not t.ok and t.status.value != "not_run"
        )
        best = next((m for m in successes if m.config == best_config), None)
        if best is None and not trials:
            # the only config left by pruning, used unmeasured as Triton does
            best = Measured(dict(best_config), math.nan, math.nan, 0, math.nan)
        if best is None:
            raise ValueError(f"the best config {best_config} has no successful trial")
        return cls(best, successes, failures)
