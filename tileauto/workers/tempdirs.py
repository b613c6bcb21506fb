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
killed, the next worker any process starts, or ``tileauto cache clear``, removes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tileauto._logging import get_logger
from tileauto.cache.scratch import ScratchDir, claim_scratch_dir, remove_leftovers
from tileauto.utils.tmp import restore_tempdir, use_own_tempdir

log = get_logger("procs")

__all__ = ["KIND", "job_temp_dir", "worker_temp_dir"]

KIND = "work"  # the scratch folders' prefix


def worker_temp_dir() -> ScratchDir | None:
    """A claimed temp folder for one worker, or None where none can be made (the worker then
    uses the system's temp folder, as any program would)."""
    from tileauto.cache.locks import writable_staging
    from tileauto.settings import Settings

    try:
        staging = writable_staging(Settings.from_env()).staging_dir
        _remove_orphans(Path(staging))
        return claim_scratch_dir(staging, KIND)
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


def _remove_orphans(staging: Path) -> None:
    """The temp folders of workers whose process died (a claim that nobody holds)."""
    done = remove_leftovers(staging, only=KIND)
    if done.removed:
        log.info(
            "removed %d worker temp folders of ended processes (%.1f MB) from %s",
            len(done.removed),
            done.size_bytes / 1e6,
            staging,
        )
