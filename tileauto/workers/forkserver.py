"""The caller's side of the forkserver: a fresh interpreter with TVM and torch loaded that forks
workers on request (the server itself is :mod:`tileauto.workers.entry`).

It pays for importing TVM and torch once, and each worker is then a cheap fork of it. One
server serves the whole process (:meth:`ForkServer.shared`); it exits, and its workers die,
when this process exits.
"""

from __future__ import annotations

import itertools
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path

from tileauto.errors import WorkerError

#: torch's fork-safe GPU check, set for the server (see :meth:`ForkServer._running`)
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
PRELOAD = ("tileauto.build.preload",)  # the builder's: TVM's compiler and torch


class ServedProcess:
    """A worker forked by the forkserver: its pid and, once it exits, its exit code.

    The worker is the server's child, not ours; the server writes its exit code (``-N`` for
    signal N) to the status socket when it ends.
    """

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid = pid
        self.exitcode: int | None = None
        self._status = status
        self._lock = threading.Lock()

    def is_alive(self) -> bool:
        return not self._ended(0.0)

    def join(self, timeout: float | None = None) -> None:
        self._ended(timeout)

    def _ended(self, timeout: float | None) -> bool:
        if self.exitcode is not None:
            return True
        try:
            ready, _, _ = select.select([self._status], [], [], timeout)
        except (OSError, ValueError):  # closed meanwhile by another thread's read
            ready = [self._status]
        if not ready:
            return False
        with self._lock:
            if self.exitcode is None:
                try:
                    data = self._status.recv(4)
                except OSError:
                    data = b""
                # no code: the server died, and its workers with it (PR_SET_PDEATHSIG)
                self.exitcode = (
                    struct.unpack("i", data)[0] if len(data) == 4 else -int(signal.SIGKILL)
                )
                self._status.close()
        return True


class ForkServer:
    """Starts worker processes as forks of one preloaded interpreter. Thread-safe.

    Args:
        preload: modules the server imports before its first fork.
    """

    _shared: ForkServer | None = None
    _shared_lock = threading.Lock()

    def __init__(self, preload: tuple[str, ...] = PRELOAD) -> None:
        self.preload = preload
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._ids = itertools.count()

    @classmethod
    def shared(cls) -> ForkServer:
        """The process's forkserver (started with its first worker)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = ForkServer()
            return cls._shared

    @classmethod
    def stop_shared(cls) -> None:
        """Stop the process's forkserver, if it runs (its workers die with it)."""
        server = cls._shared
        if server is not None:
            server.stop()

    @classmethod
    def forget_in_child(cls) -> None:
        """In a child forked from this process: close the copy of the server's socket (the
        server must see the end of file when this process exits) and start afresh if needed."""
        server = cls._shared
        if server is not None and server._control is not None:
            try:
                server._control.close()
            except OSError:
                pass
        cls._shared = None
        cls._shared_lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def spawn(
        self, name: str, env: dict[str, str], output_path: str | None
    ) -> tuple[ServedProcess, Connection]:
        """A new worker running :func:`worker_entry.child_main`, and our end of its pipe.

        Raises:
            WorkerError: the server could not be started or died.
        """
        ours, theirs = socket.socketpair()
        status_ours, status_theirs = socket.socketpair()
        try:
            request_id = next(self._ids)
            message = pickle.dumps((request_id, name, env, output_path))
            with self._lock:
                control = self._running()
                try:
                    socket.send_fds(control, [message], [theirs.fileno(), status_theirs.fileno()])
                    pid = self._reply(control, request_id)
                except OSError as exc:
                    self._forget()
                    raise WorkerError(f"the worker forkserver failed: {exc}") from None
        except BaseException:
            # an interrupt between the request and its answer: a worker forked for it sees
            # the end of file on its pipe and exits
            for sock in (ours, status_ours):
                sock.close()
            raise
        finally:
            theirs.close()
            status_theirs.close()
        return ServedProcess(pid, status_ours), Connection(ours.detach())

    def stop(self) -> None:
        """Kill the server now; its workers die with it (PR_SET_PDEATHSIG). Lock-free."""
        proc, control = self._proc, self._control
        if proc is not None:
            try:
                proc.kill()
            except OSError:
                pass
        if control is not None:
            try:
                control.close()
            except OSError:
                pass

    def _reply(self, control: socket.socket, request_id: int) -> int:
        while True:
            data = control.recv(4096)
            if not data:
                raise OSError("the server exited")
            answered, pid = pickle.loads(data)
            if answered == request_id:  # an earlier request interrupted before its answer
                return pid

    def _running(self) -> socket.socket:
        if self._proc is not None and self._proc.poll() is None and self._control is not None:
            return self._control
        self._forget()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        # the package's own folder first, so ``-m`` finds it however the caller found it
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        # Importing torch and TVM asks torch whether a GPU is there, and torch's default check
        # initializes the CUDA driver, which a forked child cannot use: every CUDA compile in a
        # worker then fails with cudaErrorInitializationError (seen on an H200). torch's NVML
        # check answers without initializing it, so the workers forked from here start clean.
        env.setdefault(NVML_CHECK, "1")
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tileauto.workers.entry",
                    str(theirs.fileno()),
                ],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # out of the terminal's reach: Ctrl-C is the caller's
            )
        except OSError as exc:
            ours.close()
            raise WorkerError(f"cannot start the worker forkserver: {exc}") from None
        finally:
            theirs.close()
        config = {
            "sys_path": list(sys.path),
            "preload": list(self.preload),
            "pythonpath": os.environ.get("PYTHONPATH"),
        }
        ours.send(pickle.dumps(config))
        self._control = ours
        return ours

    def _forget(self) -> None:
        self.stop()
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._proc, self._control = None, None


# A child forked from this process, by a worker start or by the program itself, must not hold
# the server's socket (the server would outlive this process) nor stop the server at its exit.
os.register_at_fork(after_in_child=ForkServer.forget_in_child)
