"""Telling the user about a tuning: the table, the progress bar, and the streaming trial log.

A session reports through one :class:`~tileauto.tune.stages.Reporter`; the one it uses by default
(:func:`default_reporter`) is two reporters fanned out by :class:`Reporters`:

* :class:`TrialLog` writes a JSON-lines file into the logs folder, one line per trial *as soon
  as it is measured* (a killed run keeps every config it measured); :func:`read_trial_log`
  reads it back;
* :class:`ConsoleReporter` shows the progress bar (stderr) and, with ``verbose``, prints the
  table to **stdout** at the end.

Everything else (a session starts, a config is measured, a session ends, a log cannot be
written) is a ``logging`` event of the ``tileauto.report.reporter`` logger: the application decides
what to show. A reporter never raises into the session.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from tileauto._logging import get_logger
from tileauto.records import Trial, is_never_tried

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

    def finished(self, summary: dict[str, Any]) -> Path | None:
        """The session ended (``summary``: see ``TuningSession``); the log file it wrote."""


LOG_FORMAT = 1  # version of the JSON-lines trial log ("format" in its start line)


def _ms(value: float) -> str:
    """Milliseconds with four significant digits (sub-microsecond kernels stay readable)."""
    return f"{value:.4g}"


def _fmt_config(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "(defaults)"


def format_table(
    trials: Sequence[Trial], best_index: int | None, default: Trial | None, title: str = ""
) -> str:
    """A plain-text table: config, status, median and spread, speedup over default, winner mark."""
    base = default.latency_ms if default is not None and default.ok else None
    rows = [
        ("", "#", "config", "status", "median ms", "p20-p80 ms", "n", "vs default", "compile s")
    ]
    listed = [t for t in trials if not is_never_tried(t)]  # counted below the table instead
    never = len(trials) - len(listed)
    if default is not None and default.index < 0:
        listed = [default, *listed]
    for t in listed:
        mark = "*" if t.index == best_index and t.ok else ""
        idx = "default" if t.index < 0 else str(t.index)
        if t.ok and t.latency is not None:
            lat = _ms(t.latency.median_ms)
            spread = f"{_ms(t.latency.p20_ms)}-{_ms(t.latency.p80_ms)}"
            n = str(t.latency.samples)
            speed = f"{base / t.latency.median_ms:.2f}x" if base else "-"
            status = "ok"
        else:
            lat, spread, n, speed = "-", "-", "-", "-"
            status = t.reason
            if len(status) > 70:
                status = status[:67] + "..."
        comp = f"{t.compile_s:.2f}" if t.compile_s is not None else "-"
        rows.append((mark, idx, _fmt_config(t.config), status, lat, spread, n, speed, comp))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[3] = min(widths[3], 70)
    lines = [title] if title else []
    for j, r in enumerate(rows):
        lines.append(
            "  ".join(
                c.ljust(widths[i]) if i != 3 else c.ljust(widths[3]) for i, c in enumerate(r)
            ).rstrip()
        )
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    if never:
        lines.append(f"{never} config(s) of the space never tried (not failures; not listed)")
    return "\n".join(lines)


_LISTED = 10  # failed configs listed one by one; more are grouped by reason
_GROUPS = 8  # reasons listed when grouped (the log has every config)
_EXAMPLES = 3  # configs named per reason


def failure_summary(trials: Sequence[Trial]) -> str:
    """Why the failed configs failed: one line per config when there are a few; grouped by
    reason, most frequent first, when there are more (a space of thousands whose configs all
    fail for one reason gets two lines, not thousands). Configs the search never tried are
    left out: they are not failures, and the caller counts them."""
    failed = [t for t in trials if not t.ok and not is_never_tried(t)]
    if len(failed) <= _LISTED:
        return "\n".join(f"  [{t.index}] {_fmt_config(t.config)}: {t.reason}" for t in failed)
    groups: dict[str, list[Trial]] = {}
    for t in failed:
        groups.setdefault(t.reason, []).append(t)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))  # stable: first seen first
    lines = []
    for reason, group in ranked[:_GROUPS]:
        named = ", ".join(f"[{t.index}] {_fmt_config(t.config)}" for t in group[:_EXAMPLES])
        more = f" and {len(group) - _EXAMPLES} more" if len(group) > _EXAMPLES else ""
        lines.append(f"  {len(group)} config(s): {reason}\n    {named}{more}")
    if len(ranked) > _GROUPS:
        rest = sum(len(group) for _, group in ranked[_GROUPS:])
        lines.append(f"  {rest} more config(s), for {len(ranked) - _GROUPS} other reasons")
    return "\n".join(lines)


def summary_table(name: str, summary: dict[str, Any]) -> str:
    """The table of a finished session (``summary``: what ``Reporter.finished`` gets), titled."""
    trials = summary.get("trials", ())
    best: Trial | None = summary.get("best")
    passed = sum(t.ok for t in trials)
    never = summary.get("never_tried") or 0  # not listed as trials (a large product)
    measured = sum(not is_never_tried(t) for t in trials)
    size = len(trials) + never
    title = f"autotune {name}: {size} configs"
    if measured < size:
        title += f", {measured} measured ({size - measured} never tried)"
    title += f", {passed} passed"
    title += f", {summary.get('elapsed_s') or 0.0:.1f} s" + (", no winner" if best is None else "")
    if summary.get("stop_reason"):
        title += f" (stopped: {summary['stop_reason']})"
    table = format_table(trials, best.index if best else None, summary.get("default"), title=title)
    if never:
        table += f"\n{never:,} config(s) of the space never tried (not failures; not listed)"
    pruned = summary.get("pruned") or {}
    if pruned:
        rules = ", ".join(f"{rule!r}: {n:,}" for rule, n in pruned.items())
        table += (
            f"\npruned by constraints before compiling (not failures): "
            f"{sum(pruned.values()):,} ({rules})"
        )
    return table


class TrialLog:
    """A JSON-lines log of one session, streamed: a killed run keeps every measured trial.

    The file is ``<logs_dir>/autotune-<name>-<YYYYmmdd-HHMMSS>-<pid>.jsonl``, private (mode
    0600; a logs folder it creates is 0700). Its lines are, in order::

        {"event": "start", "format": 1, "name": ..., "configs": ..., "pid": ..., "time": ...}
        {"event": "trial", "index": ..., "config": ..., "status": ..., ...}   # one per trial
        {"event": "finish", "best": ..., "default": ..., "table": ..., ...}

    A trial line (``Trial.to_json()`` plus ``"event"``) is written and flushed when
    :meth:`trial` is called. At :meth:`finished`, the final trial of every index not yet
    logged as it is (reused from the cache, a duplicate config, not run, timed again) is
    written before the finish line: a complete log holds every config of the space, and the
    last line of an index is its final record.

    Any ``OSError`` disables the log with one warning; no method raises.
    """

    def __init__(self, logs_dir: Path | str, name: str) -> None:
        self.logs_dir = Path(logs_dir)
        self.name = name
        self.path: Path | None = None
        self._file: IO[str] | None = None
        self._logged: dict[int, Trial] = {}  # the last trial written for each index

    def started(self, name: str, configs: int) -> None:
        """Open the file and write the start line."""
        try:
            self._file, self.path = _open_private(self.logs_dir, self.name)
        except OSError as exc:
            self._disable(exc)
            return
        start = {"event": "start", "format": LOG_FORMAT, "name": name, "configs": configs}
        self._write({**start, "pid": os.getpid(), "time": _now()})

    def steps(self, total: int) -> None:
        """Not logged (progress is the console's)."""

    def step(self) -> None:
        """Not logged (progress is the console's)."""

    def trial(self, trial: Trial) -> None:
        """Write one trial line and flush it."""
        if self._file is not None:
            self._write({"event": "trial", **trial.to_json()})
            self._logged[trial.index] = trial

    def finished(self, summary: dict[str, Any]) -> Path | None:
        """Write the trials not logged yet and the finish line, close; the file's path."""
        if self._file is None:
            return None
        for t in summary.get("trials", ()):
            if self._logged.get(t.index) != t:
                self.trial(t)
        best, default = summary.get("best"), summary.get("default")
        trials = summary.get("trials", ())
        self._write(
            {
                "event": "finish",
                "name": summary.get("name", self.name),
                "configs": len(trials),
                "passed": sum(t.ok for t in trials),
                "best": best.to_json() if best is not None else None,
                "default": default.to_json() if default is not None else None,
                "ref_latency_ms": summary.get("ref_latency_ms"),
                "elapsed_s": summary.get("elapsed_s"),
                "stop_reason": summary.get("stop_reason"),
                "key": summary.get("key"),
                "error": summary.get("error"),
                "table": summary_table(summary.get("name", self.name), summary),
                "time": _now(),
            }
        )
        file, self._file = self._file, None
        if file is None:  # the finish line could not be written
            return None
        try:
            file.close()
        except OSError as exc:
            self._disable(exc)
            return None
        return self.path

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(record, default=str) + "\n")
            self._file.flush()  # in the kernel now: a killed process keeps this line
        except OSError as exc:
            self._disable(exc)

    def _disable(self, exc: OSError) -> None:
        log.warning(
            "tuning log %s disabled: %s (tuning goes on without it)",
            self.path or self.logs_dir,
            exc,
        )
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _open_private(logs_dir: Path, name: str) -> tuple[IO[str], Path]:
    """A new log file, mode 0600, never one that exists (two sessions in one second)."""
    logs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "kernel"
    stem = f"autotune-{safe}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    for n in range(100):
        path = logs_dir / (f"{stem}.jsonl" if n == 0 else f"{stem}-{n}.jsonl")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        return os.fdopen(fd, "w", encoding="utf-8"), path
    raise FileExistsError(f"no free log file name for {stem}.jsonl in {logs_dir}")


def read_trial_log(path: Path | str) -> tuple[tuple[Trial, ...], dict[str, Any] | None]:
    """Read a :class:`TrialLog` file: its trials, and its finish line (None: the run was killed).

    The trials are the last line logged for each config index, in index order (a killed run
    gives the configs it measured). The default config when it is not in the space (index
    ``-1``) is left out; a complete log has it as ``finish["default"]``. The finish line is
    returned as read (``best`` and ``default`` are ``Trial.to_json()`` dicts or None). A last
    line cut short (the process was killed while writing it) is ignored.

    Raises:
        ValueError: the file is not a trial log, or a line before the last one is not JSON.
        OSError: the file cannot be read.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break  # a killed run's last, partial line
            raise ValueError(
                f"{path}: line {number} is not JSON ({exc}); the log is damaged"
            ) from exc
    if not records or records[0].get("event") != "start":
        raise ValueError(
            f"{path} is not a tileauto trial log (no start line): expected a .jsonl log"
        )
    by_index: dict[int, Trial] = {}
    finish = None
    for record in records[1:]:
        event = record.pop("event", None)
        if event == "trial":
            try:
                trial = Trial.from_json(record)
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}: a trial line is not a trial ({exc!r})") from exc
            if trial.index >= 0:
                by_index[trial.index] = trial
        elif event == "finish":
            finish = record
    return tuple(by_index[i] for i in sorted(by_index)), finish


class ConsoleReporter:
    """The progress bar while tuning and, with ``verbose``, the table on stdout at the end.

    The bar is tqdm's, on stderr, shown only on a terminal (or a notebook). Each trial and the
    end are also ``logging`` events (DEBUG and INFO) of the ``tileauto.report.reporter`` logger.
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
            _fmt_config(trial.config),
            _ms(trial.latency_ms) + " ms" if trial.latency_ms is not None else trial.reason,
        )
        if trial.latency_ms is not None and trial.ok:
            if self._best_ms is None or trial.latency_ms < self._best_ms:
                self._best_ms = trial.latency_ms
        if self._bar is not None:
            best = self._best_ms
            self._bar.set_postfix_str(
                f"best {best:.4f} ms" if best is not None else "no valid config yet"
            )

    def finished(self, summary: dict[str, Any]) -> Path | None:
        """Close the bar; with ``verbose`` and a winner, print the table (and the log's path)."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()
        log_path = summary.get("log_path")
        best: Trial | None = summary.get("best")
        if best is None:
            # no winner: the session raises NoValidConfigError, which carries the failures
            why = (summary.get("error") or "no config passed").strip().splitlines()
            log.info("autotune %s: no winner: %s (log: %s)", self.name, why[0], log_path)
            return None
        log.info(
            "autotune %s: best [%d] %s at %s ms in %.1f s (log: %s)",
            self.name,
            best.index,
            _fmt_config(best.config),
            _ms(best.latency_ms) if best.latency_ms is not None else "-",
            summary.get("elapsed_s") or 0.0,
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
    and hands it to the reporters after it as ``summary["log_path"]``.
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

    def finished(self, summary: dict[str, Any]) -> Path | None:
        path = summary.get("log_path")
        for reporter in self.reporters:
            got = self._call(reporter, "finished", {**summary, "log_path": path})
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
