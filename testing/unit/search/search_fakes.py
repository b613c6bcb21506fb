"""Fakes for the search tests: trials without a compiler, a measure that looks them up, and a
small synthetic space with one optimum, a constraint and a region that fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.space import Space


def ok_trial(index: int, latency_ms: float, spread_ms: float = 0.0) -> Trial:
    half = spread_ms / 2
    stats = LatencyStats(
        latency_ms, latency_ms - half, latency_ms + half, latency_ms, latency_ms, 5
    )
    return Trial(index, {}, TrialStatus.OK, latency=stats)


def failed_trial(index: int, status: TrialStatus = TrialStatus.COMPILE_ERROR) -> Trial:
    return Trial(index, {}, status, error="failed on purpose")


def lookup(
    space: Space, latency: Callable[[dict[str, Any]], float | None]
) -> Callable[[list[int]], Iterator[tuple[int, Trial]]]:
    """A ``measure`` for run_search: each config's latency from a function (None: it fails)."""

    def measure(indices: list[int]) -> Iterator[tuple[int, Trial]]:
        for i in indices:
            value = latency(space.config(i))
            yield i, failed_trial(i) if value is None else ok_trial(i, value)

    return measure


def bowl() -> tuple[Space, Callable[[dict[str, Any]], float | None]]:
    """A 1,920-config product with one optimum, a constraint, and a region that fails."""
    from tileauto.space import product

    space = product(
        block_M=[16, 32, 48, 64, 96, 128, 192, 256],
        block_N=[16, 32, 64, 128, 256],
        micro=[1, 2, 4, 8],
        layout=["row", "col", "tiled"],
        stages=[1, 2, 3, 4],
        constraints=["block_M % micro == 0"],
    )

    def latency(c: dict[str, Any]) -> float | None:
        if c["micro"] == 8 and c["block_N"] >= 128:
            return None  # too many registers: fails to compile
        penalty = {"row": 0.0, "col": 0.6, "tiled": 0.3}[c["layout"]]
        return (
            1.0
            + abs(c["block_M"] - 128) / 64
            + abs(c["block_N"] - 64) / 64
            + abs(c["micro"] - 4) / 2
            + penalty
            + 0.1 * abs(c["stages"] - 3)
        )

    return space, latency
