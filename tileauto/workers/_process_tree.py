"""A worker process and its descendants: wait for one that was forked, kill a whole tree.

A killed worker must take with it everything its job started: its process group (a ``g++``)
and descendants that left the group (a daemon that called ``setsid``). The tree is walked
while it is stopped, so nothing starts meanwhile, and before the worker dies (afterwards its
orphans belong to init, out of reach). Nothing here takes a lock: the safety net calls it from
a signal handler.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Protocol

import psutil

_POLL_S = 0.05  # without a pidfd (Linux < 5.3), how often an exit is looked for


class ProcessHandle(Protocol):
    """What a worker needs of its process: the forked one here, or a forkserver's."""

    pid: int
    exitcode: int | None

    def is_alive(self) -> bool: ...
    def join(self, timeout: float | None = None) -> None: ...


class ForkedProcess:
    """A child forked from this process: waited on through a pidfd (Linux >= 5.3)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exitcode: int | None = None
        self._lock = threading.Lock()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # pragma: no cover - old kernels
            self._pidfd = None

    def is_alive(self) -> bool:
        return not self._ended(0.0)

    def join(self, timeout: float | None = None) -> None:
        self._ended(timeout)

    def _ended(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.exitcode is None:
            with self._lock:
                if self.exitcode is None and self._collect():
                    break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if self._pidfd is not None:
                try:
                    select.select([self._pidfd], [], [], left)
                except (OSError, ValueError):
                    pass
            else:  # pragma: no cover - no pidfd: poll
                time.sleep(min(_POLL_S, left) if left is not None else _POLL_S)
        return True

    def _collect(self) -> bool:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid == 0:
            return False
        self.exitcode = os.waitstatus_to_exitcode(status)
        return True

    def __del__(self) -> None:
        # closed only here: another thread may still be waiting on it (it stays readable)
        try:
            if self._pidfd is not None:
                os.close(self._pidfd)
        except Exception:  # noqa: BLE001 - at interpreter exit, quietly
            pass


def descendants(pid: int) -> list[psutil.Process]:
    """Every living descendant of ``pid`` (children of children too), stopped where possible.

    Each is sent SIGSTOP as it is found, so none can start another while the tree is walked;
    the walk is repeated until it finds nothing new.
    """
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return []
    found: dict[int, psutil.Process] = {}
    for _ in range(10):
        try:
            new = [c for c in root.children(recursive=True) if c.pid not in found]
        except psutil.Error:
            break
        if not new:
            break
        for child in new:
            found[child.pid] = child
            try:
                child.suspend()
            except psutil.Error:
                pass
    return list(found.values())


def kill_all(processes: list[psutil.Process]) -> None:
    for proc in processes:
        try:
            proc.kill()  # psutil checks the creation time: a reused pid is left alone
        except psutil.Error:
            pass


def kill_tree(pid: int) -> list[psutil.Process]:
    """SIGKILL a worker, its process group and every descendant (setsid ones too). No lock.

    Returns the processes killed that could be looked at (the worker first), for a caller that
    must wait until they are gone (:func:`wait_gone`)."""
    try:
        root = [psutil.Process(pid)]
    except psutil.Error:
        root = []
    for send in (os.kill, os.killpg):
        try:
            send(pid, signal.SIGSTOP)
            break
        except (ProcessLookupError, PermissionError):
            continue
    found = descendants(pid)
    for send in (os.killpg, os.kill):
        try:
            send(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    kill_all(found)
    return [*root, *found]


def wait_gone(processes: list[psutil.Process], timeout_s: float) -> None:
    """Wait until every process of ``processes`` has ended (a zombie counts as ended), for at
    most ``timeout_s`` in all. Takes no lock (a signal handler calls it)."""
    deadline = time.monotonic() + timeout_s
    for proc in processes:
        while True:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:  # gone (or its pid reused: psutil checks the creation time)
                break
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)
