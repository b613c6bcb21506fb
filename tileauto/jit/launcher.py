"""tileauto's thread pool for the parallel loops of CPU kernels (``src/launcher.c``).

A CPU kernel with parallel loops calls them through a pointer in its own library, which TVM
points at TVM's thread pool when it loads the library. :func:`install` points it at this pool
instead, in the tuning's run worker and in your process alike, so that a kernel is timed and
run by the same pool.

Why: TVM's pool waits for its workers with ``sched_yield``, and on a busy machine each yield
gives the core away for a whole time slice. This pool waits as an OpenMP runtime does (spin,
then sleep on a futex) and follows the machine's load (``/proc/loadavg``, read every 20 ms
while it runs): busy, its workers sleep as soon as a region ends; quiet, they spin briefly,
each on a CPU of its own. ``docs/tuning.md`` ("Thread count", "On a shared machine") and
``docs/performance.md`` have the measurements.

One pool per process: its thread count is the last one set (:func:`set_threads`, which
:meth:`tileauto.JITKernel.use_threads` calls with the count the kernel was tuned with).
Without the extension (no C compiler at install time, or not Linux), or with
``TILEAUTO_THREAD_POOL=tvm``, kernels keep TVM's pool.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from tileauto._logging import get_logger
from tileauto.settings import Settings

_log = get_logger(__name__)


def _extension() -> ModuleType | None:
    try:
        from tileauto import _launcher
    except ImportError:  # built without a C compiler: TVM's pool runs the kernels
        return None
    return _launcher


_EXT = _extension()


def available() -> bool:
    """Whether this install has the pool (the extension module was built)."""
    return _EXT is not None


def install(lib_path: str | Path) -> bool:
    """Point the parallel loops of the loaded kernel library ``lib_path`` at this pool.

    False when it keeps TVM's pool: ``TILEAUTO_THREAD_POOL=tvm``, no extension, a platform
    other than Linux, a library with no parallel loops or with TVM's parallel barrier, or no
    library of that path loaded here.
    """
    if _EXT is None or Settings.from_env().thread_pool != "tileauto":
        return False
    outcome = _EXT.install(os.path.realpath(lib_path))  # the name the loader was given
    if outcome != "installed":
        _log.debug("tileauto: %s keeps TVM's thread pool (%s)", lib_path, outcome)
    return bool(outcome == "installed")


def set_threads(num_threads: int) -> int:
    """Run every later parallel region of the installed kernels with ``num_threads`` threads
    (the calling one included); returns the count set."""
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be an int >= 1, got {num_threads!r}")
    if _EXT is None:
        return num_threads
    return int(_EXT.set_threads(num_threads))


def threads() -> int | None:
    """The pool's thread count (None without the extension)."""
    return None if _EXT is None else int(_EXT.threads())


def stats() -> dict[str, int]:
    """The pool's counters in this process: ``launches`` (parallel regions run by the pool),
    ``serial`` (regions run in the calling thread: one thread set, or the pool was busy),
    ``caller_sleeps``, ``workers`` (threads started), ``threads``, the spin times."""
    return {} if _EXT is None else dict(_EXT.stats())
