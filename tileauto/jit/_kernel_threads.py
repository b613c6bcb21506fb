"""The thread count a parallel CPU kernel runs with, on tileauto's pool or on TVM's.

A kernel's parallel loops run on tileauto's thread pool (:mod:`tileauto.jit.launcher`) when
it can take them, else on the calling thread's TVM pool, which is sized when it starts and
cannot grow afterwards. Both are set here; the busy-machine rule of
:mod:`tileauto.jit.thread_pool` decides before TVM's pool starts whether it may spin.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from tileauto.jit import launcher
from tileauto.jit import runtime as tvm_runtime
from tileauto.jit.thread_pool import decide_spin
from tileauto.machine import available_cpus


def pool_of(lib_path: Path) -> str | None:
    """The pool a loaded CPU kernel library's parallel loops run on: ``"tileauto"`` or
    ``"tvm"``; None for a library without parallel loops. Call it after TVM's loader, which
    points the loops at TVM's pool."""
    if not uses_thread_pool(lib_path):
        return None
    return "tileauto" if launcher.install(lib_path) else "tvm"


def uses_thread_pool(lib_path: Path) -> bool:
    """Whether a CPU kernel library has parallel loops (it calls TVM's thread pool)."""
    try:
        return b"TVMBackendParallelLaunch" in lib_path.read_bytes()
    except OSError:
        return False


def set_kernel_threads(pool: str | None, num_threads: int, func_name: str) -> int:
    """Run the kernel ``func_name``, whose loops run on ``pool``, with ``num_threads``.

    tileauto's pool is one per process, shared by every kernel: the last count set holds.
    TVM's pool of the calling thread cannot grow once started: then this warns when the
    count it runs with differs. Returns that count.
    """
    if pool == "tileauto":
        return launcher.set_threads(num_threads)
    got = configure_thread_pool(num_threads)
    if got != num_threads:
        warnings.warn(
            f"tileauto: kernel {func_name} was tuned with {num_threads} threads but TVM's "
            f"thread pool in this thread started smaller, before the kernel was loaded; it "
            f"runs with {got}. Set TVM_NUM_THREADS={num_threads} before the first TVM kernel "
            f"runs, or tune with num_threads={got}.",
            RuntimeWarning,
            stacklevel=3,
        )
    return got


def configure_thread_pool(num_threads: int) -> int:
    """Make TVM's CPU thread pool of the calling thread run ``num_threads`` threads.

    TVM gives each thread its own pool, sized from ``TVM_NUM_THREADS`` when the pool starts
    (by default half the cores on x86); afterwards it can be set to any count up to that
    size, never above. So when ``TVM_NUM_THREADS`` is unset, it is set here to every core
    before this thread's pool starts; a variable the caller set is left alone.

    Returns:
        The thread count the calling thread's pool runs with now; less than ``num_threads``
        when the pool had started smaller.
    """
    decide_spin(num_threads)  # before the pool starts: TVM reads the spin count then
    if "TVM_NUM_THREADS" in os.environ:
        current = tvm_runtime.num_threads()
    else:
        cores = available_cpus()
        os.environ["TVM_NUM_THREADS"] = str(max(num_threads, cores))
        current = tvm_runtime.num_threads()  # starts this thread's pool if it has none
        # what later pools get: the rule's default, so a later tuning reads no foreign count
        os.environ["TVM_NUM_THREADS"] = str(cores)
    if current != num_threads:
        # mode 1 (kBig) is what TVM's pool starts with: every core on a homogeneous CPU
        tvm_runtime.config_threadpool(1, num_threads)
        current = tvm_runtime.num_threads()
    return current
