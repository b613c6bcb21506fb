"""The memory watcher beside a run actor, and what the driver makes of its answer.

The watcher is an actor on the same node that kills the run actor when it grows past its memory
limit: the driver may be on another machine, where the actor's process cannot be seen.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tileauto.machine import size_text
from tileauto.workers.procs import WorkerCrashed

_WATCH_POLL_S = 0.05  # how often a run actor's memory is looked at (as a local worker's)
_WATCH_SCAN_S = 1.0  # how often for new children (a scan of every process of the node)
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

        def ready(self) -> int:
            return os.getpid()

        def watch(self, pid: int, baseline: int, limit: int) -> int | None:
            """Poll the resident set of ``pid`` and its children until it is more than
            ``limit`` bytes above ``baseline``: then kill them and return the growth. None
            once ``pid`` is gone (it died of something else)."""
            import psutil

            try:
                proc = psutil.Process(pid)
            except psutil.Error:
                return None
            children: list[psutil.Process] = []
            scan_at = 0.0
            while True:
                try:
                    if time.monotonic() >= scan_at:
                        children = proc.children(recursive=True)
                        scan_at = time.monotonic() + _WATCH_SCAN_S
                    rss = proc.memory_info().rss
                    if rss == 0 and proc.status() == psutil.STATUS_ZOMBIE:
                        return None  # dead, not reaped yet
                except psutil.Error:
                    return None
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
                    return rss - baseline
                time.sleep(_WATCH_POLL_S)

    return _MemoryWatch


MemoryWatch = memory_watch_class()


def grown(ray: Any, watch: Any, wait_s: float) -> int | None:
    """What the watcher ``watch`` (its answer's ref) says within ``wait_s``: how much the
    actor grew when it was killed for it; None when it was not (gone otherwise, the watcher
    lost, or no answer yet)."""
    if not ray.wait([watch], timeout=wait_s)[0]:
        return None
    try:
        answer: int | None = ray.get(watch)
    except ray.exceptions.RayError:
        return None
    return answer


def out_of_memory(limit: int) -> WorkerCrashed:
    return WorkerCrashed(
        f"out of memory: the Ray run actor took more than {size_text(limit)} and was killed",
        out_of_memory=True,
    )
