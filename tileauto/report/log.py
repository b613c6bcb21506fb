"""The JSON-lines trial log, written as trials are measured, and its reader.

Each trial line is flushed when it is measured, so a killed run keeps every config it measured
(Helion's ``AutotuneLogSink`` does the same); :func:`read_trial_log` reads a log back.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import IO, Any

from tileauto._logging import get_logger
from tileauto.records import SessionSummary, Trial
from tileauto.report.table import summary_table

log = get_logger("report")

LOG_FORMAT = 1  # version of the JSON-lines trial log ("format" in its start line)


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

    def finished(self, summary: SessionSummary) -> Path | None:
        """Write the trials not logged yet and the finish line, close; the file's path."""
        if self._file is None:
            return None
        rest = [t for t in summary.trials if self._logged.get(t.index) != t]
        # one write for them all (a big space's never-tried configs): a line each, one flush
        self._write(*({"event": "trial", **t.to_json()} for t in rest))
        best, default = summary.best, summary.default
        trials = summary.trials
        self._write(
            {
                "event": "finish",
                "name": summary.name,
                "configs": len(trials),
                "passed": sum(t.ok for t in trials),
                "best": best.to_json() if best is not None else None,
                "default": default.to_json() if default is not None else None,
                "ref_latency_ms": summary.ref_latency_ms,
                "elapsed_s": summary.elapsed_s,
                "stop_reason": summary.stop_reason,
                "key": summary.key,
                "error": summary.error,
                "table": summary_table(summary.name, summary),
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

    def _write(self, *records: dict[str, Any]) -> None:
        if self._file is None or not records:
            return
        try:
            self._file.write("".join(json.dumps(r, default=str) + "\n" for r in records))
            self._file.flush()  # in the kernel now: a killed process keeps these lines
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
