"""The Reporter protocol, the console reporter and the fan-out to several reporters.

A session reports through one :class:`Reporter`; by default (:func:`default_reporter`) the trial
log and the console, fanned out by :class:`Reporters`. Everything else (a session starts, a
config is measured, a log cannot be written) is a ``logging`` event of the ``tileauto.report``
logger: the application decides what to show. A reporter never raises into the session.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tileauto._logging import get_logger
from tileauto.records import SessionSummary, Trial
from tileauto.report.log import TrialLog
from tileauto.report.table import format_config, format_ms, summary_table

log = get_logger("report")


@runtime_checkable
class Reporter(Protocol):
    """Tells the user what a session does. Must not raise (a report never stops tuning)."""

    def started(self, name: str, configs: int) -> None:
        """A session of ``name`` starts over ``configs`` configs."""

    def steps(self, total: int) -> None:
        """``total`` more steps (a compile, a run) are coming (for a progress bar)."""

    def step(self) -> None:
        """One step is done."""

    def trial(self, trial: Trial) -> None:
        """One config is measured (its trial is complete: index, status, latency, times)."""

    def finished(self, summary: SessionSummary) -> Path | None:
        """The session ended (how: ``summary``); the log file it wrote."""


class ConsoleReporter:
    """The progress bar while tuning and, with ``verbose``, the table on stdout at the end.

    The bar is tqdm's, on stderr, shown only on a terminal (or a notebook). Each trial and the
    end are also ``logging`` events (DEBUG and INFO) of the ``tileauto.report`` logger.
    """

    def __init__(self, name: str, verbose: bool = True) -> None:
        self.name = name
        self.verbose = verbose
        self._bar: Any = None
        self._best_ms: float | None = None

    def started(self, name: str, configs: int) -> None:
        """Open the bar."""
        self.name = name
        log.info("autotune %s: tuning %d configs", name, configs)
        if self.verbose and self._bar is None:
            self._bar = _progress_bar(name)

    def steps(self, total: int) -> None:
        """Grow the bar by ``total`` steps."""
        if self._bar is not None:
            self._bar.total = (self._bar.total or 0) + total
            self._bar.refresh()

    def step(self) -> None:
        """Advance the bar."""
        if self._bar is not None:
            self._bar.update(1)

    def trial(self, trial: Trial) -> None:
        """Show the best latency so far on the bar."""
        log.debug(
            "autotune %s: [%d] %s: %s",
            self.name,
            trial.index,
            format_config(trial.config),
            format_ms(trial.latency_ms) + " ms" if trial.latency_ms is not None else trial.reason,
        )
        if trial.latency_ms is not None and trial.ok:
            if self._best_ms is None or trial.latency_ms < self._best_ms:
                self._best_ms = trial.latency_ms
        if self._bar is not None:
            best = self._best_ms
            self._bar.set_postfix_str(
                f"best {format_ms(best)} ms" if best is not None else "no valid config yet"
            )

    def finished(self, summary: SessionSummary) -> Path | None:
        """Close the bar; with ``verbose`` and a winner, print the table (and the log's path)."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()
        log_path = summary.log_path
        best = summary.best
        if best is None:
            # no winner: the session raises NoValidConfigError, which carries the failures
            why = (summary.error or "no config passed").strip().splitlines()
            log.info("autotune %s: no winner: %s (log: %s)", self.name, why[0], log_path)
            return None
        log.info(
            "autotune %s: best [%d] %s at %s ms in %.1f s (log: %s)",
            self.name,
            best.index,
            format_config(best.config),
            format_ms(best.latency_ms) if best.latency_ms is not None else "-",
            summary.elapsed_s,
            log_path,
        )
        if self.verbose:
            table = summary_table(self.name, summary)
            print(table + (f"\nlog: {log_path}" if log_path else ""), flush=True)
        return None


def _progress_bar(name: str) -> Any:
    from tqdm.auto import tqdm

    class Bar(tqdm):
        # No monitor thread: it outlives the bar, and a live thread stops the next tuning of
        # this process from forking its workers (see Builder.fork_unsafe_reason).
        monitor_interval = 0

    return Bar(total=0, desc=f"autotune {name}", unit="step", leave=False, disable=None)


class Reporters:
    """Several reporters as one: each call goes to each, in order; one that raises is skipped.

    A reporter that raises is logged (one warning per reporter) and the others go on: a
    report never stops tuning. :meth:`finished` returns the first log path a reporter returns,
    and hands it to the reporters after it as ``summary.log_path``.
    """

    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = reporters
        self._failed: set[int] = set()

    def started(self, name: str, configs: int) -> None:
        self._each("started", name, configs)

    def steps(self, total: int) -> None:
        self._each("steps", total)

    def step(self) -> None:
        self._each("step")

    def trial(self, trial: Trial) -> None:
        self._each("trial", trial)

    def finished(self, summary: SessionSummary) -> Path | None:
        path = summary.log_path
        for reporter in self.reporters:
            got = self._call(reporter, "finished", replace(summary, log_path=path))
            if path is None and isinstance(got, Path):
                path = got
        return path

    def _each(self, method: str, *args: Any) -> None:
        for reporter in self.reporters:
            self._call(reporter, method, *args)

    def _call(self, reporter: Reporter, method: str, *args: Any) -> Any:
        try:
            return getattr(reporter, method)(*args)
        except Exception as exc:  # noqa: BLE001 - a report must not stop tuning
            if id(reporter) not in self._failed:
                self._failed.add(id(reporter))
                log.warning(
                    "reporter %s.%s raised %s: %s (tuning goes on)",
                    type(reporter).__name__,
                    method,
                    type(exc).__name__,
                    exc,
                )
            return None


def default_reporter(logs_dir: Path | str, name: str, verbose: bool = True) -> Reporters:
    """What a session reports through by default: the trial log, then the console."""
    return Reporters(TrialLog(logs_dir, name), ConsoleReporter(name, verbose))
