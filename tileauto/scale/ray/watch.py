"""The memory watcher beside a run actor, and what the driver makes of its answer.

The watcher is an actor on the same node that kills the run actor when it grows past its memory
limit: the driver may be on another machine, where the actor's process cannot be seen. It also
holds the run actor's phase memory (:mod:`tileauto.workers.phase`): the program of the user's
the actor was in when it died, read by the watcher once the actor is gone.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tileauto.machine import size_text
from tileauto.workers.procs import WorkerCrashed

_WATCH_POLL_S = 0.05  # how often a run actor's memory is looked at (as a local worker's)
_WATCH_SCAN_S = 1.0  # how often for new children (a scan of every process of the node)
_PHASE_BYTES = 64  # tileauto.workers.phase.PHASE_BYTES (the watcher may not import tileauto)
VERDICT_S = 5.0  # a dead actor's watcher answers within a poll; this only bounds a lost one


def memory_watch_class() -> type:
    """The memory watcher's actor class, made in a function so that Ray ships it by value:
    its process imports psutil, not this module (torch, TVM), so it may use only the standard
    library, psutil and itself."""

    class _MemoryWatch:
        """An actor beside a run actor (pinned to its node, no CPU): kills it when it grows
        past its memory limit. The driver may be on another machine, where the actor's
        process cannot be seen."""

        def __init__(self) -> None:
            import psutil  # noqa: F401 - once, while the run actor starts

            self.phase_fd: int | None = None

        def ready(self) -> tuple[int, int | None]:
            """This process's pid, and the run actor's phase memory: a memory file of this
            process that the actor maps through ``/proc/<pid>/fd/<fd>`` (None: none here)."""
            try:
                fd = os.memfd_create("tileauto-phase-ray")
                os.ftruncate(fd, _PHASE_BYTES)
            except (AttributeError, OSError):
                fd = None
            self.phase_fd = fd
            return os.getpid(), fd

        def phase(self) -> str | None:
            """The phase the run actor was in (as tileauto.workers.phase.read_phase)."""
            if self.phase_fd is None:
                return None
            try:
                data = os.pread(self.phase_fd, _PHASE_BYTES, 0)
            except OSError:
                return None
            return data.split(b"\0", 1)[0].decode(errors="replace") or None

        def watch(self, pid: int, baseline: int, limit: int) -> tuple[int | None, str | None]:
            """Poll the resident set of ``pid`` and its children until it is more than
            ``limit`` bytes above ``baseline``: then kill them and return the growth, with
            the phase the actor was in. A growth of None once ``pid`` is gone (it died of
            something else, or the driver killed it)."""
            import psutil

            try:
                proc = psutil.Process(pid)
            except psutil.Error:
                return None, self.phase()
            children: list[psutil.Process] = []
            scan_at = 0.0
            while True:
                try:
                    if time.monotonic() >= scan_at:
                        children = proc.children(recursive=True)
                        scan_at = time.monotonic() + _WATCH_SCAN_S
                    rss = proc.memory_info().rss
                    if rss == 0 and proc.status() == psutil.STATUS_ZOMBIE:
                        return None, self.phase()  # dead, not reaped yet
                except psutil.Error:
                    return None, self.phase()
                for child in children:
                    try:
                        rss += child.memory_info().rss
                    except psutil.Error:
                        pass  # ended since the scan
                if rss - baseline > limit:
                    for victim in (proc, *children):
                        try:
                            victim.kill()
                        except psutil.Error:
                            pass
                    return rss - baseline, self.phase()
                time.sleep(_WATCH_POLL_S)

    return _MemoryWatch


MemoryWatch = memory_watch_class()


def verdict(ray: Any, watch: Any, wait_s: float) -> tuple[int | None, str | None]:
    """What the watcher ``watch`` (its answer's ref) says within ``wait_s``: how much the
    actor grew when it was killed for it (None when it was not: gone otherwise, the watcher
    lost, or no answer yet), and the program of the user's it was in then (None: none)."""
    if not ray.wait([watch], timeout=wait_s)[0]:
        return None, None
    try:
        growth, phase = ray.get(watch)
    except ray.exceptions.RayError:
        return None, None
    return growth, phase


def out_of_memory(limit: int, phase: str | None = None) -> WorkerCrashed:
    return WorkerCrashed(
        f"out of memory: the Ray run actor took more than {size_text(limit)} and was killed",
        out_of_memory=True,
        phase=phase,
    )
