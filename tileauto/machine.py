"""What this process may use: its CPUs (affinity-aware) and the machine's memory.

Every option that sizes a resource (threads, compile workers, a run worker's memory limit) is
checked against these at the call, with an error that names the option, what was expected and
what came. Kept apart from :mod:`tileauto.settings`, which reads the variables: a count is
checked where the workers start (a Ray node has CPUs and memory of its own).
"""

from __future__ import annotations

import os
import sys

from tileauto.errors import SettingsError


def _affinity() -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


# read at import: TVM's pool later narrows its starting thread's mask (docs/tuning.md, threads)
_IMPORT_CPUS = _affinity()


def process_cpus() -> frozenset[int] | None:
    """The CPUs tileauto counts and gives its workers: the calling thread's, unless TVM's pool
    narrowed them (TVM is loaded and they are a strict subset of the mask when tileauto was
    imported), then that mask. None where the system does not say."""
    now = _affinity()
    if now is None or _IMPORT_CPUS is None:
        return now
    if now < _IMPORT_CPUS and "tvm_ffi" in sys.modules:
        return _IMPORT_CPUS
    return now


def available_cpus() -> int:
    """CPUs this process may run on (affinity-aware; see :func:`process_cpus`)."""
    cpus = process_cpus()
    return len(cpus) if cpus else (os.cpu_count() or 1)


def too_many_threads(count: int, what: str = "threads") -> str | None:
    """Why ``count`` threads (or worker processes: ``what``) are too many for this process, or
    None when they are not.

    More threads or compile workers than CPUs only wait for each other (and can exhaust the
    machine's threads or memory).
    """
    cpus = available_cpus()
    if count <= cpus:
        return None
    return (
        f"{count} {what} are more than the {cpus} CPUs this process may use "
        f"(os.sched_getaffinity): expected at most {cpus}"
    )


def run_memory_limit_bytes(
    limit_mb: int, total_bytes: int | None = None, where: str = "this machine"
) -> int | None:
    """The memory (``TILEAUTO_RUN_MEMORY_LIMIT_MB``) a run worker may take beyond its size at
    start, in bytes (None for ``-1``: 90% of what is available when it starts), checked against
    ``total_bytes`` (default: this machine's memory) of ``where``.

    Raises:
        SettingsError: the limit is more than that memory: it would never be reached before
            the system's out-of-memory killer, which picks a victim of its own. Checked where
            the run worker starts (a Ray node has memory of its own), as the CPU counts are.
    """
    if limit_mb <= 0:
        return None
    if total_bytes is None:
        import psutil

        total_bytes = psutil.virtual_memory().total
    limit = limit_mb * 2**20
    if limit > total_bytes:
        total_mb = total_bytes // 2**20
        raise SettingsError(
            f"TILEAUTO_RUN_MEMORY_LIMIT_MB={limit_mb}: more than the {total_mb} MiB of memory of "
            f"{where}: expected at most {total_mb} (or -1: 90% of the memory available when the "
            "run worker starts)"
        )
    return limit
