"""What this process may use: its CPUs (affinity-aware) and the machine's memory.

Every option that sizes a resource (threads, compile workers, a run worker's memory limit) is
checked against these at the call, with an error that names the option, what was expected and
what came. Kept apart from :mod:`tileauto.settings`, which reads the variables: a count is
checked where the workers start (a Ray node has CPUs and memory of its own).

In a container (``docker run --cpus=2 --memory=4g``, a Kubernetes pod, a batch job's cgroup)
the machine's CPUs and memory are not what the process may use: the CPU quota and the memory
limit of the process's own cgroup (read from ``/proc/self/cgroup``; cgroup v2 ``cpu.max`` and
``memory.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` and
``memory.limit_in_bytes``, the tightest of its folder and those above it) bound them.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tileauto.errors import SettingsError

PROC_CGROUP = Path("/proc/self/cgroup")  # this process's cgroups, one line per hierarchy
CGROUP_ROOT = Path("/sys/fs/cgroup")  # where the hierarchies are mounted
_NO_LIMIT = 1 << 60  # cgroup v1 writes "no memory limit" as a number near 2**63


@dataclass(frozen=True)
class ContainerLimits:
    """What this process's cgroup allows; None where it sets no limit (or says nothing)."""

    cpus: float | None  # the CPU quota over its period: 1.5 is one and a half CPUs
    memory_bytes: int | None
    memory_file: Path | None = None  # the usage file of the cgroup whose limit that is


def read_container_limits(
    proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT
) -> ContainerLimits:
    """The CPU quota and memory limit of the cgroup ``proc_cgroup`` names (this process's),
    read under ``root``: the tightest of its folder and every folder above it. Where the
    folder it names is not under ``root`` (a container shows its own cgroup as the root),
    ``root``'s own files are read. Anything unreadable counts as no limit."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return ContainerLimits(None, None)
    cpus: list[float] = []
    memory: list[tuple[int, Path]] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and not controllers:  # v2 (alone, or beside v1: "unified")
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            for folder in _chain(base, path):
                cpus += _cpus_v2(folder)
                memory += _memory(folder, "memory.max", "memory.current")
            continue
        names = controllers.split(",")
        mounts = [root / controllers, *(root / name for name in names)]
        mount = next((m for m in mounts if m.is_dir()), None)
        if mount is None:
            continue
        for folder in _chain(mount, path):
            if "cpu" in names:
                cpus += _cpus_v1(folder)
            if "memory" in names:
                memory += _memory(folder, "memory.limit_in_bytes", "memory.usage_in_bytes")
    limit = min(memory, default=None, key=lambda item: item[0])
    return ContainerLimits(
        min(cpus, default=None),
        None if limit is None else limit[0],
        None if limit is None else limit[1],
    )


def _chain(base: Path, path: str) -> list[Path]:
    """The cgroup folder ``path`` under ``base`` and each folder above it up to ``base``; only
    ``base`` where ``path`` is not there (or leaves it)."""
    parts = [p for p in path.split("/") if p]
    if ".." in parts or not (base.joinpath(*parts)).is_dir():
        return [base]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cpus_v2(folder: Path) -> list[float]:
    """``cpu.max`` ("max 100000", or "<quota> <period>") as CPUs; [] without a quota."""
    text = _read(folder / "cpu.max")
    fields = text.split() if text else []
    try:
        quota, period = int(fields[0]), int(fields[1])
    except (IndexError, ValueError):  # "max": no quota
        return []
    return [quota / period] if quota > 0 and period > 0 else []


def _cpus_v1(folder: Path) -> list[float]:
    """``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` as CPUs; [] without a quota (-1)."""
    try:
        quota = int(_read(folder / "cpu.cfs_quota_us") or "")
        period = int(_read(folder / "cpu.cfs_period_us") or "")
    except ValueError:
        return []
    return [quota / period] if quota > 0 and period > 0 else []


def _memory(folder: Path, limit_name: str, usage_name: str) -> list[tuple[int, Path]]:
    """A memory limit file's bytes and the usage file beside it; [] without a limit."""
    try:
        limit = int(_read(folder / limit_name) or "")  # "max" (v2): no limit
    except ValueError:
        return []
    return [(limit, folder / usage_name)] if 0 < limit < _NO_LIMIT else []


@functools.lru_cache(maxsize=4)
def _limits_of(proc_cgroup: Path, root: Path) -> ContainerLimits:
    return read_container_limits(proc_cgroup, root)


def container_limits() -> ContainerLimits:
    """This process's container limits (:func:`read_container_limits`), read once."""
    return _limits_of(PROC_CGROUP, CGROUP_ROOT)


def memory_bytes() -> int:
    """The memory this process may use in all: the machine's, or its cgroup's limit if lower."""
    import psutil

    total = int(psutil.virtual_memory().total)
    limit = container_limits().memory_bytes
    return total if limit is None else min(total, limit)


def available_memory_bytes() -> int:
    """The memory free for this process now: the machine's available memory, or what its
    cgroup's limit leaves (the limit less the cgroup's usage) if less."""
    import psutil

    free = int(psutil.virtual_memory().available)
    limits = container_limits()
    if limits.memory_bytes is None:
        return free
    used = _read(limits.memory_file) if limits.memory_file is not None else None
    left = limits.memory_bytes - (int(used) if used and used.isdigit() else 0)
    return max(0, min(free, left))


def size_text(n_bytes: float) -> str:
    """A size for a message: GiB from 1 GiB up, MiB below (a small limit never reads 0.0 GiB)."""
    if n_bytes >= 2**30:
        return f"{n_bytes / 2**30:.1f} GiB"
    return f"{n_bytes / 2**20:.1f} MiB"


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
    """CPUs this process may run on (affinity-aware; see :func:`process_cpus`), at most its
    container's CPU quota rounded up (:func:`container_limits`; at least 1)."""
    cpus = process_cpus()
    count = len(cpus) if cpus else (os.cpu_count() or 1)
    quota = container_limits().cpus
    return count if quota is None else max(1, min(count, math.ceil(quota)))


def _cpus_said() -> str:
    """Where :func:`available_cpus` has its count from, for a message."""
    quota = container_limits().cpus
    if quota is not None and math.ceil(quota) < len(process_cpus() or range(os.cpu_count() or 1)):
        return f"its cgroup's CPU quota of {quota:g}"
    return "os.sched_getaffinity"


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
        f"({_cpus_said()}): expected at most {cpus}"
    )


def run_memory_limit_bytes(
    limit_mb: int, total_bytes: int | None = None, where: str = "this machine"
) -> int | None:
    """The memory (``TILEAUTO_RUN_MEMORY_LIMIT_MB``) a run worker may take beyond its size at
    start, in bytes (None for ``-1``: 90% of what is available when it starts), checked against
    ``total_bytes`` (default: the memory this process may use, :func:`memory_bytes`: this
    machine's, or its container's limit) of ``where``.

    Raises:
        SettingsError: the limit is more than that memory: it would never be reached before
            the system's out-of-memory killer, which picks a victim of its own. Checked where
            the run worker starts (a Ray node has memory of its own), as the CPU counts are.
    """
    if limit_mb <= 0:
        return None
    if total_bytes is None:
        total_bytes = memory_bytes()
        if container_limits().memory_bytes == total_bytes:
            where = "this container (its cgroup's memory limit)"
    limit = limit_mb * 2**20
    if limit > total_bytes:
        total_mb = total_bytes // 2**20
        raise SettingsError(
            f"TILEAUTO_RUN_MEMORY_LIMIT_MB={limit_mb}: more than the {total_mb} MiB of memory of "
            f"{where}: expected at most {total_mb} (or -1: 90% of the memory available when the "
            "run worker starts)"
        )
    return limit
