"""A compile worker's own temp folder: made before it starts, removed when it ends.

The same for a compile run as a Ray task (:func:`job_temp_dir`, for the length of the task: a
Ray worker process outlives its tasks).

Each compile worker (``Worker(own_tmp=True)``, as :class:`~tileauto.workers.pool.WorkerPool`
makes them) gets a folder ``<staging>/work-<pid>-<hex>`` (the cache's staging dir, or
its fallback: :func:`tileauto.cache.locks.writable_staging`) as its ``TMPDIR`` and
:mod:`tempfile` folder. A job killed half-way (a compile past its timeout while TVM exports
its object files or ``g++`` writes its ``cc*.o``) leaves its temp files there, and the folder
goes when the worker is reaped. The folder is claimed as any scratch folder is
(:func:`tileauto.cache.scratch.claim_scratch_dir`): if the process that owns the worker is
killed, the next worker any process starts, or ``tileauto cache clear``, removes it. At exit,
and on a SIGTERM, the safety net removes every such folder of this process
(:func:`remove_own_now`), even one a thread was making or reaping at that moment.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from tileauto._logging import get_logger
from tileauto.cache import disk
from tileauto.cache.scratch import ScratchDir, claim_scratch_dir
from tileauto.utils.tmp import restore_tempdir, use_own_tempdir

log = get_logger("procs")

__all__ = ["KIND", "job_temp_dir", "remove_own_now", "worker_temp_dir"]

KIND = "work"  # the scratch folders' prefix


class _Claims:
    """Where this process made its workers' temp folders, and the lock held while one is made:
    :func:`remove_own_now` takes it, so that no folder is half made while it looks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: int | None = None  # the thread making a folder now
        self.parents: set[Path] = set()
        self.closed = False  # the process is ending: no more folders


_CLAIMS = _Claims()


def _forget_in_child() -> None:
    global _CLAIMS
    _CLAIMS = _Claims()  # a forked child's folders would be named by its own pid


os.register_at_fork(after_in_child=_forget_in_child)


def worker_temp_dir() -> ScratchDir | None:
    """A claimed temp folder for one worker, or None where none can be made (the worker then
    uses the system's temp folder, as any program would)."""
    from tileauto.cache.locks import writable_staging
    from tileauto.settings import Settings

    try:
        # the folders of workers whose process died go first (scratch.claim_scratch_dir)
        staging = Path(writable_staging(Settings.from_env()).staging_dir)
        claims = _CLAIMS
        with claims.lock:
            if claims.closed:
                return None
            claims.holder = threading.get_ident()
            claims.parents.add(staging)
            try:
                return claim_scratch_dir(staging, KIND)
            finally:
                claims.holder = None
    except Exception as exc:  # noqa: BLE001 - a bad setting or folder: the system temp folder
        log.debug("no temp folder of its own for a worker: %s", exc)
        return None


@contextlib.contextmanager
def job_temp_dir() -> Iterator[Path | None]:
    """For one job of a process that outlives it (a Ray compile task's worker): a claimed temp
    folder of its own as this process's ``TMPDIR`` and :mod:`tempfile` folder while the job
    runs, removed after it. A job killed with its process leaves it to the next
    :func:`worker_temp_dir` or :func:`job_temp_dir` on that machine (its claim ended with the
    process). Yields the folder, or None where none can be made."""
    tmp = worker_temp_dir()
    if tmp is None:
        yield None
        return
    before = use_own_tempdir(str(tmp.path))
    try:
        yield tmp.path
    finally:
        restore_tempdir(before)
        tmp.remove()


def remove_own_now(wait_s: float = 1.0) -> int:
    """Remove every worker temp folder this process made (``work-<this pid>-*``), and make no
    more: at exit and on SIGTERM, once the workers are killed. Returns how many went.

    A folder whose worker another thread was reaping (its handle already taken out of the
    worker) or starting goes too: a folder being made by another thread is waited for (at most
    ``wait_s``), one being made by this thread (a signal landed in the middle) is found by its
    name. Takes no lock that this thread may hold (a signal handler calls it).
    """
    claims = _CLAIMS
    claims.closed = True
    mine = claims.holder == threading.get_ident()
    held = False if mine else claims.lock.acquire(timeout=wait_s)
    removed = 0
    try:
        for parent in list(claims.parents):
            for path in parent.glob(f"{KIND}-{os.getpid()}-*"):
                try:
                    trash = disk.to_trash(path)
                except OSError:
                    continue
                disk.discard(trash)
                removed += 1
    finally:
        if held:
            claims.lock.release()
    return removed
