"""A picture of a tuning: each config's latency, its failures, the winner and the default.

matplotlib is an optional extra (``pip install "tileauto[plot]"``). It is imported only when a
picture is drawn, and drawn on a figure of its own with the Agg canvas: pyplot is never
imported, so the application's backend and its open figures are left alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tileauto.records import LatencyStats, Trial, TrialStatus

# How each way of failing is drawn in the strip under the latencies: (marker, colour).
_FAILURE_STYLE: dict[TrialStatus, tuple[str, str]] = {
    TrialStatus.COMPILE_ERROR: ("x", "tab:red"),
    TrialStatus.COMPILE_TIMEOUT: ("1", "tab:red"),
    TrialStatus.COMPILE_CRASH: ("X", "tab:red"),
    TrialStatus.COMPILE_OUT_OF_MEMORY: ("P", "tab:red"),
    TrialStatus.MISMATCH: ("D", "tab:purple"),
    TrialStatus.OUT_OF_BOUNDS: ("d", "tab:purple"),
    TrialStatus.RUN_ERROR: ("s", "tab:orange"),
    TrialStatus.CRASH: ("X", "tab:brown"),
    TrialStatus.TIMEOUT: ("v", "tab:olive"),
    TrialStatus.OUT_OF_MEMORY: ("P", "tab:pink"),
    TrialStatus.CANCELLED: ("|", "tab:gray"),
    TrialStatus.NOT_RUN: ("|", "lightgray"),  # faint: nothing went wrong, it was not measured
}
_LOG_SCALE_RATIO = 20.0  # latencies spanning more than this factor are drawn on a log axis
_FORMATS = (".png", ".svg", ".pdf")


def plot_trials(
    trials: Sequence[Trial],
    path: Path | str,
    *,
    best_index: int | None = None,
    default: Trial | None = None,
    title: str | None = None,
) -> Path:
    """Draw the latency of every config of a space into an image file.

    The x axis is the config's index in the space, the y axis its median latency in ms (a log
    axis when the positive latencies span more than a factor of 20, a 0 ms config then drawn
    as a triangle at its bottom), with the p20-p80 spread as error bars. Configs that did not pass are marked in a strip below, one row per status
    (``compile_error``, ``crash``, ``timeout``, ``mismatch``...), with their counts; configs
    that were not measured are drawn faintly. The winner is a star, and the default config a
    ring and a dashed line at its latency (or its status in the legend when it failed).

    Args:
        trials: the trials, each with its index in the space (``AutotuneResult.trials``).
        path: the image file; ``.png``, ``.svg`` or ``.pdf``, by its suffix.
        best_index: the winner's index, highlighted (None: no winner marked).
        default: the default config's trial (its index is -1 when it is not in the space).
        title: the picture's title (default: how many configs, how many passed).

    Returns:
        The path written.

    Raises:
        ImportError: matplotlib is not installed (install ``tileauto[plot]``).
        ValueError: ``path`` has a suffix that is not a supported image format.
    """
    path = check_image_path(path)
    figure_cls, canvas_cls, ticker = _matplotlib()
    trials = [t for t in trials if t.index >= 0]
    failed = [t for t in trials if not (t.ok and t.latency is not None)]
    statuses = [s for s in _FAILURE_STYLE if any(t.status is s for t in failed)]
    fig = figure_cls(figsize=(min(max(6.0, 0.08 * len(trials)), 16.0), 4.8), layout="constrained")
    canvas_cls(fig)
    if statuses:
        ax, strip = fig.subplots(2, 1, sharex=True, height_ratios=[4, 0.6 + 0.3 * len(statuses)])
        _draw_failures(strip, failed, statuses)
    else:
        ax = fig.subplots()
        ax.set_xlabel("config index")
    _draw_latencies(ax, trials, best_index, default)
    last = max((t.index for t in trials), default=0)
    ax.set_xlim(-0.5, last + 0.5)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True, min_n_ticks=1))
    passed = sum(t.ok for t in trials)
    configs = f"{len(trials)} config{'s' if len(trials) != 1 else ''}"
    # a title is text, never TeX: a config value such as "$x^$" is not a formula to parse
    ax.set_title(title if title is not None else f"{configs}, {passed} passed", parse_math=False)
    fig.savefig(path, dpi=120)
    return path


def check_image_path(path: Path | str) -> Path:
    """``path`` as a Path, when its suffix is an image format :func:`plot_trials` writes.

    Raises:
        ValueError: the suffix is not ``.png``, ``.svg`` or ``.pdf``.
    """
    path = Path(path)
    if path.suffix.lower() not in _FORMATS:
        raise ValueError(
            f"plot_trials: path={str(path)!r} has an unsupported suffix {path.suffix!r}; "
            f"expected one of {', '.join(_FORMATS)}"
        )
    return path


def _matplotlib() -> tuple[Any, Any, Any]:
    """matplotlib's Figure, its Agg canvas and its ticker module, or an ImportError."""
    try:
        import matplotlib  # noqa: F401 - first, so a blocked or missing package fails here
        from matplotlib import ticker
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            'plot_trials needs matplotlib, an optional extra: pip install "tileauto[plot]"'
        ) from exc
    return Figure, FigureCanvasAgg, ticker


def _draw_latencies(
    ax: Any, trials: Sequence[Trial], best_index: int | None, default: Trial | None
) -> None:
    """The passing configs' medians with their p20-p80 bars, the winner and the default."""
    ok = [t for t in trials if t.ok and t.latency is not None]
    ax.set_ylabel("latency (ms)\nmedian, p20-p80")
    ax.grid(True, alpha=0.3)
    if not ok:
        ax.text(0.5, 0.5, "no config passed", transform=ax.transAxes, ha="center", va="center")
        ax.set_yticks([])
        if _label_default(ax, default):
            ax.legend(loc="upper right", fontsize="small")
        return
    stats = [t.latency for t in ok if t.latency is not None]
    floor = _log_floor(stats)
    if floor is not None:
        ax.set_yscale("log")
    drawn = [(t, s) for t, s in zip(ok, stats) if floor is None or s.median_ms > 0]
    ax.errorbar(
        [t.index for t, _ in drawn],
        [s.median_ms for _, s in drawn],
        yerr=[
            [max(s.median_ms - s.p20_ms, 0.0) for _, s in drawn],
            [max(s.p80_ms - s.median_ms, 0.0) for _, s in drawn],
        ],
        fmt="o",
        ms=4,
        color="tab:blue",
        elinewidth=1,
        capsize=2,
        alpha=0.8,
        label=f"ok ({len(ok)})",
    )
    zeros = [t.index for t, s in zip(ok, stats) if floor is not None and s.median_ms <= 0]
    if zeros and floor is not None:  # 0 ms has no place on a log axis: a row at its bottom
        ax.plot(
            zeros, [floor] * len(zeros), "v", ms=6, color="tab:blue", label=f"0 ms ({len(zeros)})"
        )
    best = next((t for t in ok if t.index == best_index), None)
    if best is not None and best.latency is not None:
        ms = best.latency.median_ms
        ax.plot(
            [best.index],
            [ms if floor is None or ms > 0 else floor],
            "*",
            ms=16,
            color="gold",
            markeredgecolor="black",
            zorder=5,
            label=f"best [{best.index}]: {ms:.4g} ms",
        )
    _label_default(ax, default)
    ax.legend(loc="best", fontsize="small")


def _log_floor(stats: Sequence[LatencyStats]) -> float | None:
    """Where 0 ms is drawn on a log axis, or None for a linear one.

    The axis is log when the positive latencies span more than ``_LOG_SCALE_RATIO``: a 0 ms
    config (a legal time) does not turn it linear, it is drawn below the fastest positive one.
    """
    positive = [v for s in stats for v in (s.p20_ms, s.median_ms) if v > 0]
    if not positive or max(s.p80_ms for s in stats) / min(positive) <= _LOG_SCALE_RATIO:
        return None
    return min(positive) / 2


def _label_default(ax: Any, default: Trial | None) -> bool:
    """The default config: a dashed line at its latency and a ring, or its failure."""
    if default is None:
        return False
    if default.ok and default.latency is not None:
        ms = default.latency.median_ms
        ax.axhline(ms, ls="--", lw=1, color="tab:green", label=f"default: {ms:.4g} ms")
        if default.index >= 0:
            ax.plot([default.index], [ms], "o", ms=20, mfc="none", mec="tab:green", mew=2, zorder=6)
    else:
        ax.plot([], [], " ", label=f"default: {default.status.value}")  # a legend line only
    return True


def _draw_failures(ax: Any, failed: Sequence[Trial], statuses: Sequence[TrialStatus]) -> None:
    """One row per status of the configs that did not pass, labelled with its count."""
    counts = Counter(t.status for t in failed)
    for row, status in enumerate(statuses):
        marker, colour = _FAILURE_STYLE[status]
        xs = [t.index for t in failed if t.status is status]
        ax.scatter(xs, [row] * len(xs), marker=marker, color=colour, s=30, linewidths=1.2)
    ax.set_yticks(range(len(statuses)))
    ax.set_yticklabels([f"{s.value} ({counts[s]})" for s in statuses], fontsize="small")
    ax.set_ylim(-0.6, len(statuses) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("config index")
    ax.grid(True, axis="x", alpha=0.3)
