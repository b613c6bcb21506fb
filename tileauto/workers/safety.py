"""The safety net of worker processes: what the whole process shares about them.

The live workers (killed at exit and on SIGTERM, with what their jobs started), whether forking
still works here, and the scratch folders a SIGTERM removes. :mod:`tileauto.workers.procs`
registers each worker it starts; why each of these: docs/architecture.md ("Worker processes").
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tileauto.cache import disk
from tileauto.workers import tempdirs
from tileauto.workers._process_tree import kill_tree, wait_gone
from tileauto.workers.forkserver import ForkServer

__all__ = [
    "NET",
    "clean_up_at_exit",
    "kill_workers_on_sigterm",
    "remove_on_sigterm",
    "shutdown_all",
]

_GONE_S = 0.5  # how long a SIGTERM or the exit waits for the killed workers to be gone


class SafetyNet:
    """What the whole process shares: its live workers (killed at exit and on SIGTERM), and
    whether forking still works here (a forked worker's probe can prove it does not)."""

    def __init__(self) -> None:
        self.live: weakref.WeakSet[Any] = weakref.WeakSet()  # procs.Worker objects
        self.fork_broken: str | None = None
        self.scratch: weakref.WeakSet[Any] = weakref.WeakSet()  # removed on SIGTERM

    def kill_everything(self) -> None:
        """Kill every live worker and the forkserver, now, wait (briefly) until they are gone,
        then remove the workers' temp folders: every one this process made, also those of a
        worker another thread was reaping or starting (:func:`tempdirs.remove_own_now`). Takes
        no lock this thread may hold (a signal handler)."""
        workers = list(self.live)
        killed = []
        for worker in workers:
            handle = worker._proc
            if handle is not None and handle.exitcode is None:
                killed += kill_tree(handle.pid)
        ForkServer.stop_shared()
        wait_gone(killed, _GONE_S)  # a dying g++ must not write into a folder being removed
        for worker in workers:
            tmp = worker._tmp
            if tmp is not None:
                tmp.remove()
        tempdirs.remove_own_now(_GONE_S)

    def remove_scratch(self) -> None:
        """Remove every registered scratch folder (after the workers that wrote in it died)."""
        for folder in list(self.scratch):
            try:
                folder.remove()
            except Exception:  # noqa: BLE001 - best effort: the process is about to die
                pass

    def forget_in_child(self) -> None:
        """In a child forked from this process (a worker, or the program's own ``os.fork``):
        the workers and folders are the parent's, never to be killed or removed from here, and
        the copies of the workers' pipes are closed (a worker sees the end of file when the
        parent closes its end, whatever the child does)."""
        for worker in list(self.live):
            worker.forget()
        self.live = weakref.WeakSet()
        self.scratch = weakref.WeakSet()


NET = SafetyNet()
os.register_at_fork(after_in_child=NET.forget_in_child)


def shutdown_all() -> None:
    """Kill every live worker and the forkserver (at exit, and on SIGTERM). Never waits."""
    try:
        NET.kill_everything()
    except Exception:  # noqa: BLE001 - best effort at exit
        pass


def remove_on_sigterm(folder: Any) -> None:
    """Have a SIGTERM remove ``folder`` (an object with ``remove()``, a claimed scratch folder)
    while :func:`kill_workers_on_sigterm` is in effect, once the workers are killed: the
    clean-up an interrupted run does on Ctrl-C, which a SIGTERM's default action skips.

    Held weakly (a folder object that is gone is forgotten); ``remove`` must be harmless on a
    folder that was removed already.
    """
    NET.scratch.add(folder)


def _on_sigterm(signum: int, frame: Any) -> None:
    # other threads go on while this runs (a worker's reaper deletes its temp folder as soon as
    # the worker dies): they start no other delete from here on, and those under way are
    # finished here, before the process dies with them half done
    disk.hold_removals(_GONE_S)
    shutdown_all()
    NET.remove_scratch()
    with contextlib.suppress(Exception):  # best effort: the process is about to die
        disk.finish_removals_now()  # a kernel being stored when the signal came, say
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # and die of it, as without this handler


@contextmanager
def kill_workers_on_sigterm() -> Iterator[None]:
    """While inside, a SIGTERM first kills every worker and what its jobs started, removes the
    scratch folders of :func:`remove_on_sigterm`, then ends the process as the default action
    would (exit status: killed by SIGTERM, no traceback).

    Without it the workers die with the process anyway (``PR_SET_PDEATHSIG``), but what their
    jobs started (a ``g++``) would outlive it. Installed only from the main thread and when
    SIGTERM has its default action (a program's own handler is left alone).
    """
    installed = False
    if threading.current_thread() is threading.main_thread():
        try:
            installed = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            if installed:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # pragma: no cover - no signals here
            installed = False
    try:
        yield
    finally:
        if installed and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def clean_up_at_exit() -> None:
    """At exit (registered with :mod:`atexit`), as on a SIGTERM: kill the workers, and finish
    the scratch other threads had under way. The daemon threads that reap workers and store
    kernels are cut off where they are when the interpreter ends (after a Ctrl-C, say): a
    folder half deleted, a kernel half staged (``cache/disk.py``'s removals)."""
    disk.hold_removals(_GONE_S)
    shutdown_all()
    with contextlib.suppress(Exception):  # best effort at exit
        disk.finish_removals_now()


atexit.register(clean_up_at_exit)
