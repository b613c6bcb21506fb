"""Old logs and kernels: what a tuning prunes at its start and ``tileauto cache clear`` removes.

Logs are pruned by age and total size (:func:`prune_logs`, :func:`clear_logs`), never one in
use, and the kernel cache by its size, the entries used longest ago first
(:func:`prune_kernels`). The leftovers of killed runs are :mod:`tileauto.cache.scratch`'s.
The rules, with their thresholds: ``docs/cache_format.md`` ("Leftovers and logs"). Reads and
deletes files only: no torch, no TVM.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.cache import disk
from tileauto.cache.scratch import process_start
from tileauto.errors import CacheError

log = get_logger("cache")

__all__ = [
    "IN_USE_S",
    "PRUNE_MAX",
    "LogFile",
    "clear_logs",
    "failed_logs_message",
    "list_logs",
    "log_in_use",
    "prune_kernels",
    "prune_logs",
    "worker_log_name",
]

IN_USE_S = 60.0  # a log written this recently may be written again: kept
PRUNE_MAX = 100  # logs deleted at most by one prune_logs, so that a tuning's start stays cheap
_RUN_LOG = re.compile(r"^autotune-.*-\d{8}-\d{6}-(?P<pid>\d+)(?:-\d+)?\.(?:log|jsonl)$")
# workers/: worker_log_name's, and the exact names tileauto gave them before (a compile pool's
# ``compile-<n>``, a run worker's ``run-<device>``); other names there are never touched. A
# pid has at most 7 digits (Linux's limit is 2**22): a date such as 20240101 is none.
_WORKER_LOG = re.compile(
    r"^(?:tileauto-worker-.+|compile-[0-9]+|run-(?:cpu|cuda))-(?P<pid>[1-9][0-9]{0,6})\.log$"
)


def worker_log_name(worker: str, pid: int) -> str:
    """The file name of worker ``worker``'s log in ``<logs>/workers``, for the process ``pid``
    that started it: tileauto's own prefix, so that pruning never takes a file of yours."""
    return f"tileauto-worker-{worker}-{pid}.log"


# -- logs ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogFile:
    """One tuning or worker log: its path, size, last write and the process named in it."""

    path: Path
    size_bytes: int
    mtime: float
    pid: int | None


def list_logs(logs_dir: Path) -> list[LogFile]:
    """The tileauto logs in ``logs_dir`` and ``logs_dir/workers``, oldest first.

    Only names tileauto writes are listed (``autotune-*-<stamp>-<pid>.log``/``.jsonl``,
    ``workers/tileauto-worker-<name>-<pid>.log``, and the older ``workers/compile-<n>-<pid>.log``
    and ``workers/run-<device>-<pid>.log``), and only regular files: the folder may hold other
    things.
    """
    return [LogFile(Path(path), size, mtime, pid) for mtime, path, size, pid in _scan(logs_dir)]


def _scan(logs_dir: Path) -> list[tuple[float, str, int, int]]:
    """(mtime, path, size, pid) of each log, oldest first; plain strings, as this runs at the
    start of every tuning."""
    out = []
    for folder, pattern in (
        (str(logs_dir), _RUN_LOG),
        (os.path.join(logs_dir, "workers"), _WORKER_LOG),
    ):
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            m = pattern.match(entry.name)
            if m is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((st.st_mtime, entry.path, st.st_size, int(m["pid"])))
    out.sort()
    return out


def log_in_use(
    item: LogFile, now: float | None = None, started: dict[int, float | None] | None = None
) -> bool:
    """Whether a log may still be written: written in the last :data:`IN_USE_S` seconds, or
    its process is still running (``started``: process start times already looked up)."""
    now = time.time() if now is None else now
    return _in_use(item.mtime, item.pid, now, {} if started is None else started)


def _in_use(mtime: float, pid: int | None, now: float, started: dict[int, float | None]) -> bool:
    if now - mtime < IN_USE_S:
        return True
    if pid is None:
        return False
    if pid not in started:
        started[pid] = process_start(pid)
    start = started[pid]
    return start is not None and start <= mtime + 1.0  # start times are rounded to clock ticks


def prune_logs(settings: Any, now: float | None = None) -> int:
    """Delete logs past ``settings.log_max_age_days`` and, oldest first, past
    ``settings.log_max_mb`` in total; never a log in use (:func:`log_in_use`).

    Called once when a tuning starts: a directory scan and one ``stat`` per log (about a
    millisecond for 300 logs), and at most :data:`PRUNE_MAX` deletions (the rest wait for the
    next tuning). Nothing raises. Returns how many logs were deleted.
    """
    max_age_s = settings.log_max_age_days * 86400.0
    max_bytes = settings.log_max_mb * 2**20
    if max_age_s <= 0 and max_bytes <= 0:
        return 0
    now = time.time() if now is None else now
    try:
        logs = _scan(settings.logs_dir)
    except OSError:
        return 0
    total = sum(size for _, _, size, _ in logs)
    removed = 0
    started: dict[int, float | None] = {}  # pid -> start time (None: not running), looked up once
    for mtime, path, size, pid in logs:  # oldest first
        too_old = max_age_s > 0 and now - mtime > max_age_s
        too_big = max_bytes > 0 and total > max_bytes
        if not (too_old or too_big) or removed >= PRUNE_MAX:
            break  # newer logs are younger, and the total fits
        if _in_use(mtime, pid, now, started) or not _unlink(path):
            continue
        total -= size
        removed += 1
    if removed:
        log.debug("pruned %d logs in %s", removed, settings.logs_dir)
    return removed


def prune_kernels(settings: Any) -> int:
    """Delete kernel-cache entries, used longest ago first, while ``kernels/`` holds more than
    ``settings.kernels_max_mb``; never one used in the last :data:`IN_USE_S` seconds (a load
    touches its folder). They are only compiles: a later tuning compiles them again.

    An entry is a folder named by its key (32 hex digits, as ``tileauto cache`` takes them),
    and its size is that of every file under it (the library is in ``kernel/``, below the
    manifest). Anything else in ``kernels/`` (a folder of the user's, a write in progress) is
    neither counted nor deleted.

    Called when a tuning starts: a directory scan and one ``stat`` per file of each entry, and
    at most :data:`PRUNE_MAX` deletions. Nothing raises. Returns how many entries were deleted.
    """
    max_bytes = settings.kernels_max_mb * 2**20
    if max_bytes <= 0 or not settings.kernel_cache_enabled:
        return 0
    kernels = settings.cache_dir / "kernels"
    entries = []
    try:
        with os.scandir(kernels) as it:
            folders = [e for e in it if disk.is_entry_key(e.name)]
    except OSError:
        return 0
    for folder in folders:
        try:
            st = folder.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            entries.append((st.st_mtime, folder.path, disk.dir_size(Path(folder.path))))
    total = sum(size for _, _, size in entries)
    if total <= max_bytes:
        return 0
    now = time.time()
    removed = 0
    for mtime, path, size in sorted(entries):  # used longest ago first
        if total <= max_bytes or removed >= PRUNE_MAX:
            break
        if now - mtime < IN_USE_S:
            continue
        try:
            disk.remove_tree(Path(path))
        except OSError:
            continue
        total -= size
        removed += 1
    if removed:
        log.debug("pruned %d kernel cache entries in %s (over its limit)", removed, kernels)
    return removed


def clear_logs(
    logs_dir: Path,
    older_than_s: float | None = None,
    *,
    dry_run: bool = False,
    now: float | None = None,
    failed: list[tuple[LogFile, OSError]] | None = None,
) -> tuple[list[LogFile], list[LogFile]]:
    """Delete every log not in use (or only those last written more than ``older_than_s``
    ago). Returns (deleted, kept in use); ``dry_run`` deletes nothing.

    A log gone already (deleted meanwhile by another process's prune) counts as deleted. A log
    that cannot be deleted (a read-only folder) does not stop the others: each is appended to
    ``failed`` with its error, where given.

    Raises:
        CacheError: some log could not be deleted and no ``failed`` list was given; the
            message names the first with its reason, and says how many were deleted.
    """
    now = time.time() if now is None else now
    deleted, kept = [], []
    errors: list[tuple[LogFile, OSError]] = [] if failed is None else failed
    started: dict[int, float | None] = {}
    for item in list_logs(logs_dir):
        if older_than_s is not None and now - item.mtime < older_than_s:
            continue
        if log_in_use(item, now, started):
            kept.append(item)
            continue
        if not dry_run:
            try:
                _unlink_or_raise(item.path)
            except OSError as exc:
                errors.append((item, exc))
                continue
        deleted.append(item)
    if failed is None and errors:
        raise CacheError(f"{failed_logs_message(errors)}; {len(deleted)} deleted")
    return deleted, kept


def failed_logs_message(failed: list[tuple[LogFile, OSError]]) -> str:
    """``could not delete N logs: <the first one>: <why>``, for logs :func:`clear_logs` could
    not delete."""
    item, exc = failed[0]
    return f"could not delete {len(failed)} logs: {item.path}: {exc.strerror or exc}"


def _unlink_or_raise(path: Path | str) -> None:
    """Delete a file; one gone already is no error (it is gone, as asked)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink(path: Path | str) -> bool:
    """Delete a file, never raising: whether it is gone now."""
    try:
        _unlink_or_raise(path)
    except OSError:
        return False
    return True
