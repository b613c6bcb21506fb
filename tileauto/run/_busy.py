"""The busy-machine note: whether a timing's threads waited for a CPU through much of it.

A timing whose threads were runnable but off the CPU for a large share of its wall time
measured the machine's load as much as the kernel; the trial then gets a note starting with
:data:`~tileauto.records.BUSY_NOTE`. ``docs/performance.md`` has the measured shares.
"""

from __future__ import annotations

import os

from tileauto.records import BUSY_NOTE

BUSY_WAIT_SHARE = 0.25  # waited this share of the timing's wall time or more: noted
MIN_JUDGED_S = 0.02  # shorter timings are not judged: the share is noise there


def runqueue_wait_s() -> float | None:
    """Seconds this process's threads have spent runnable but waiting for a CPU, summed
    (Linux: ``/proc/self/task/*/schedstat``); None where the kernel does not say."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    total, seen = 0, False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9 if seen else None


def busy_note(waited_before: float | None, wall_s: float) -> str | None:
    """The note for a timing of ``wall_s`` that started when :func:`runqueue_wait_s` was
    ``waited_before``, if its threads waited for a CPU for BUSY_WAIT_SHARE of it or more."""
    if waited_before is None or wall_s < MIN_JUDGED_S:
        return None
    now = runqueue_wait_s()
    if now is None:
        return None
    waited = max(0.0, now - waited_before)
    if waited < BUSY_WAIT_SHARE * wall_s:
        return None
    return (
        f"{BUSY_NOTE}: its threads waited {waited * 1e3:.0f} ms for a CPU during "
        f"{wall_s * 1e3:.0f} ms of timing (other processes held the cores; the latency "
        f"measures the load as much as the kernel)"
    )
