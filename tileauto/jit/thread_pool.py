"""Whether TVM's CPU thread pool should spin: the busy-machine rule, decided once per process.

TVM's pool threads spin after each parallel region (``TVM_THREAD_POOL_SPIN_COUNT``) so that
the next region finds them awake; on a machine whose cores other threads want, a spinning
worker is one more CPU-bound thread, and a parallel region waits a time slice for its slowest
thread. TVM reads the variable once per process, when its first pool thread starts.

So before a pool starts, unless the variable is set: when the threads already runnable on the
machine plus the pool's own would be more than its CPUs, this sets it to 0 in this process's
environment (its pools and the workers it starts then do not spin); otherwise TVM's default
stays. A value you set is never changed. ``docs/tuning.md`` ("On a shared machine") and
``docs/performance.md`` have the measurements.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from tileauto._logging import get_logger

SPIN_VAR = "TVM_THREAD_POOL_SPIN_COUNT"
LOADAVG = "/proc/loadavg"
SAMPLES = 5  # reads of the runnable count, INTERVAL_S apart: a burst of one read is not load
INTERVAL_S = 0.001

_log = get_logger(__name__)


@dataclass(frozen=True)
class SpinDecision:
    """What the rule saw and chose. ``spin``: the variable's value now (None: TVM's default)."""

    spin: str | None
    source: str  # "set" (by you or a parent process), "busy", "quiet", "unknown" (no loadavg)
    others: int | None = None  # runnable threads besides the caller (the median of the reads)
    cpus: int | None = None
    threads: int | None = None

    def describe(self) -> str:
        """One line for the user: what was seen and what it means for TVM's pool."""
        if self.source == "busy":
            return (
                f"{self.others} other threads were runnable on this machine's {self.cpus} CPUs "
                f"when a pool of {self.threads} threads was about to start: TVM's pool does not "
                f"spin in this process ({SPIN_VAR}=0; set it yourself to choose)"
            )
        if self.source == "set":
            return f"{SPIN_VAR}={self.spin} was set: TVM's pool uses it"
        if self.source == "quiet":
            return (
                f"{self.others} other threads were runnable on {self.cpus} CPUs: TVM's default spin"
            )
        return "the machine's runnable threads are unknown here: TVM's default spin"


_decision: SpinDecision | None = None


def runnable_threads(read: Callable[[], str] | None = None) -> int | None:
    """Threads runnable on the machine right now, the calling one included (Linux: the
    fourth field of ``/proc/loadavg``, ``running/total``); None where there is no such file."""
    try:
        text = read() if read is not None else _read_loadavg()
        return int(text.split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def _read_loadavg() -> str:
    with open(LOADAVG) as f:
        return f.read()


def other_runnable_threads(
    samples: int = SAMPLES,
    interval_s: float = INTERVAL_S,
    read: Callable[[], str] | None = None,
) -> int | None:
    """Runnable threads other than the calling one: the median of ``samples`` reads."""
    counts = []
    for i in range(samples):
        if i:
            time.sleep(interval_s)
        n = runnable_threads(read)
        if n is None:
            return None
        counts.append(max(0, n - 1))
    return round(statistics.median(counts))


def decide_spin(
    threads: int,
    *,
    probe: Callable[[], int | None] = other_runnable_threads,
    cpus: int | None = None,
) -> SpinDecision:
    """Apply the busy-machine rule once per process (see the module's text) and return it.

    ``threads``: the pool's thread count about to start. A variable already set (by you, or
    by this rule in this process or its parent) is kept, and the probe is not run. Later calls
    return the first decision: the spin count of a process is fixed when its first pool starts.
    """
    global _decision
    if _decision is not None and _decision.spin == os.environ.get(SPIN_VAR):
        return _decision
    if SPIN_VAR in os.environ:
        _decision = SpinDecision(os.environ[SPIN_VAR], "set")
        return _decision
    machine = cpus if cpus is not None else (os.cpu_count() or 1)
    others = probe()
    if others is None:
        _decision = SpinDecision(None, "unknown")
    elif others + threads > machine:
        os.environ[SPIN_VAR] = "0"
        _decision = SpinDecision("0", "busy", others, machine, threads)
    else:
        _decision = SpinDecision(None, "quiet", others, machine, threads)
    _log.info("tileauto: %s", _decision.describe())
    return _decision


def current_decision() -> SpinDecision | None:
    """The rule's decision in this process, if it was made."""
    return _decision


def _forget() -> None:
    """Tests: make the next :func:`decide_spin` decide again."""
    global _decision
    _decision = None
