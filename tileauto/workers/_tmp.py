"""A compile worker's own temp folder: made before it starts, removed when it ends.

Each compile worker (``Worker(own_tmp=True)``, as :class:`~tileauto.workers.pool.WorkerPool`
makes them) gets a folder ``<staging>/work-<pid>-<hex>`` (the cache's staging dir, or
its fallback: :func:`tileauto.cache.locks.writable_staging`) as its ``TMPDIR`` and
:mod:`tempfile` folder. A job killed half-way (a compile past its timeout while TVM exports
its object files or ``g++`` writes its ``cc*.o``) leaves its temp files there, and the folder
goes when the worker is reaped. The folder is claimed as any scratch folder is
(:func:`tileauto.cache.scratch.claim_scratch_dir`): if the process that owns the worker is
killed, the first worker started by a later process, or ``tileauto cache clear``, removes it.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tileauto._logging import get_logger
from tileauto.cache.scratch import ScratchDir, claim_scratch_dir, remove_leftovers

log = get_logger("procs")

__all__ = ["KIND", "worker_temp_dir"]

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


@functools.cache
def _remove_orphans(staging: Path) -> None:
    """Once per process and staging dir: the worker temp folders of processes that died."""
    done = remove_leftovers(staging, only=KIND)
    if done.removed:
        log.info(
            "removed %d worker temp folders of ended processes (%.1f MB) from %s",
            len(done.removed),
            done.size_bytes / 1e6,
            staging,
        )
