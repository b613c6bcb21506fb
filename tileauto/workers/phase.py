"""What a worker's job is doing, readable after the worker is gone: the phase memory.

A job marks the user's programs it calls (:func:`job_phase`: ``manual_check_prog``, a hook);
should the worker die or run out of time inside one, the caller blames that program rather
than the config. The mark is a name of at most :data:`PHASE_BYTES` bytes in a memory file
that the *caller* owns (:func:`phase_memory`) and the worker maps through the caller's
``/proc/<pid>/fd/<fd>`` (the path is in the worker's environment under :data:`PHASE_KEY`), so
it outlives the worker. A local worker's caller is its parent (:mod:`tileauto.workers.procs`);
a Ray run actor's is the memory watcher on its node (:mod:`tileauto.scale.ray.watch`, which
holds its own copy of these few lines: it may import nothing of tileauto).
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
from collections.abc import Iterator

__all__ = ["PHASE_BYTES", "PHASE_KEY", "clear_phase", "job_phase", "phase_memory", "read_phase"]

PHASE_BYTES = 64
PHASE_KEY = "__tileauto_phase__"


@contextlib.contextmanager
def job_phase(name: str) -> Iterator[None]:
    """In a worker's job: ``name`` (a program of the user's that the job calls) is what the
    job does until the block ends.

    Should the worker die or run out of time inside the block, the caller's
    :class:`~tileauto.workers.procs.WorkerCrashed` or
    :class:`~tileauto.workers.procs.WorkerTimeout` names it in ``phase``, so that the caller
    can blame that program rather than the job's own work. The name is kept in memory the
    caller reads after the worker is gone; outside a worker (a test's own object, a process
    whose caller has no memory file) the block just runs.
    """
    slot = _phase_slot(os.getpid(), os.environ.get(PHASE_KEY, ""))
    if slot is None:
        yield
        return
    before = slot[:]
    slot[:] = name.encode()[:PHASE_BYTES].ljust(PHASE_BYTES, b"\0")
    try:
        yield
    finally:
        slot[:] = before


@functools.cache
def _phase_slot(pid: int, path: str) -> mmap.mmap | None:
    """The phase memory at ``path``, mapped once per process (a fork maps its own) and path;
    None outside a worker, or where it cannot be opened."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        return mmap.mmap(fd, PHASE_BYTES)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def phase_memory(name: str) -> int | None:
    """A memory file of this process for a worker's phase; None where the system has none
    (the worker's deaths are then its job's)."""
    try:
        fd = os.memfd_create(f"tileauto-phase-{name}")
    except (AttributeError, OSError):
        return None
    try:
        os.ftruncate(fd, PHASE_BYTES)
    except OSError:
        os.close(fd)
        return None
    return fd


def clear_phase(fd: int | None) -> None:
    """Forget what an earlier job left in the memory file ``fd``."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.pwrite(fd, bytes(PHASE_BYTES), 0)


def read_phase(fd: int | None) -> str | None:
    """The phase in the memory file ``fd`` (None: none, or no file)."""
    if fd is None:
        return None
    try:
        data = os.pread(fd, PHASE_BYTES, 0)
    except OSError:
        return None
    return data.split(b"\0", 1)[0].decode(errors="replace") or None
