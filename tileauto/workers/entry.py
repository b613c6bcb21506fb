"""Inside a worker process: the job loop, and the forkserver that starts workers.

A worker forked from the caller calls :func:`child_main` right after the fork. The forkserver,
``python -m tileauto.workers.entry FD``, imports the modules it is told once and forks one
worker per request on the socket ``FD``; it runs this module, never the user's ``__main__``
(a script without a ``__main__`` guard would tune again in every worker).

Protocol with the caller (:mod:`tileauto.workers.forkserver`), on a ``SOCK_SEQPACKET`` socket:
the first message is the caller's ``sys.path`` and the modules to preload; then each request
``(request id, name, env, output path)`` carries two file descriptors, the worker's end of its
job pipe and a status socket, and is answered by ``(request id, pid)``. When a worker exits,
its exit code (``-N`` for signal N) is written to its status socket. The server exits, killing
its workers, when the caller's end of the socket closes (the caller exited).

Nothing here imports torch or TVM at module level: the server imports them as told.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from tileauto.utils.tmp import use_own_tempdir
from tileauto.workers.pickling import dumps_plain

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class RemoteError:
    """An exception raised by the job inside the worker, as data."""

    type_name: str
    message: str
    traceback: str

    @property
    def out_of_memory(self) -> bool:
        return (
            self.type_name in ("MemoryError", "OutOfMemoryError")
            or "out of memory" in self.message.lower()
        )


# -- a worker --------------------------------------------------------------------------------
def set_pdeathsig() -> None:
    """Die with the parent (SIGKILL), and keep the job's orphans (a daemonized child) as our
    descendants, so that killing the worker finds and kills them too."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    except OSError:  # pragma: no cover - non-glibc systems
        pass


def redirect_output(path: str | None) -> None:
    """Send the worker's stdout/stderr (TVM's crash traces, compiler chatter) to its log file."""
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:  # the log cannot be written after all: the output stays the parent's
        return
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _apply_settings_env(env: dict[str, str], base: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith("TILEAUTO_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    os.environ.update(base)  # the worker's own variables win


def _set_torch_threads(env: dict[str, str]) -> None:
    """Apply OMP_NUM_THREADS to torch in this thread (OpenMP's setting is per thread)."""
    torch = sys.modules.get("torch")
    threads = env.get("OMP_NUM_THREADS")
    if torch is not None and threads:
        torch.set_num_threads(max(1, int(threads)))


# Not variables: the CPUs a worker runs on and its own temp folder, from its caller (removed
# before the environment is set)
CPUS_KEY = "__tileauto_cpus__"
TMP_KEY = "__tileauto_tmp__"


def child_main(
    conn: Connection, env: dict[str, str], output_path: str | None, *, own_thread: bool
) -> None:
    """The worker: its own process group, dies with its parent, runs jobs until EOF.

    ``own_thread``: run the jobs in a new thread. A worker forked from the caller needs it:
    the thread pools of OpenMP and TVM belong to the thread that started them, and the
    caller's were not copied by the fork; a new thread starts pools of its own.
    """
    os.setpgid(0, 0)
    set_pdeathsig()
    cpus, tmp = env.get(CPUS_KEY), env.get(TMP_KEY)
    env = {k: v for k, v in env.items() if k not in (CPUS_KEY, TMP_KEY)}
    if cpus:  # the caller's CPUs, which its thread's mask may have lost (machine.process_cpus)
        try:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        except (AttributeError, OSError, ValueError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C goes to it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # a mask inherited from a caller's thread
    os.environ.update(env)
    if tmp:  # its own, removed by the caller when this worker ends (workers.tempdirs)
        use_own_tempdir(tmp)
    redirect_output(output_path)
    if not own_thread:
        serve(conn, env)
        return
    jobs = threading.Thread(target=serve, args=(conn, env, True), name="tileauto-jobs")
    jobs.start()
    jobs.join()


def serve(conn: Connection, env: dict[str, str], set_threads: bool = False) -> None:
    """Run jobs from ``conn`` until the caller closes it."""
    if set_threads:
        _set_torch_threads(env)
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            path, settings_env, fn, args = cloudpickle.loads(payload)
            if path != sys.path:
                sys.path[:] = path
            _apply_settings_env(settings_env, env)
            result: Any = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as data
            result = ("error", RemoteError(type(exc).__name__, str(exc), traceback.format_exc()))
        try:
            data = dumps_plain(result)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps(
                ("error", RemoteError(type(exc).__name__, f"result not picklable: {exc}", ""))
            )
        try:
            conn.send_bytes(data)
        except OSError:  # the caller is gone
            return


def run_child(target: Any, *args: Any, **kwargs: Any) -> None:
    """Run ``target`` as the whole life of a just-forked child, then leave with ``os._exit``."""
    code = 0
    try:
        sys.stdin.close()
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's stdin for its whole life
        target(*args, **kwargs)
    except BaseException:  # noqa: BLE001 - the child must never return into the caller's code
        code = 1
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code)


# -- the forkserver --------------------------------------------------------------------------
class _Server:
    """Forks workers on request; reports each one's exit code on its status socket."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.status: dict[int, socket.socket] = {}  # worker pid -> its status socket
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd fires

    def run(self) -> None:
        while True:
            control = self.control.fileno()
            ready, _, _ = select.select([control, self.wake_r], [], [])
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
                self.reap()
            if control in ready and not self.handle_request():
                break
        for pid in list(self.status):  # the caller is gone: so are its workers
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def handle_request(self) -> bool:
        try:
            message, fds, _, _ = socket.recv_fds(self.control, 1 << 16, 2)
        except OSError:
            return False
        if not message:
            return False  # EOF: the caller exited
        request_id, name, env, output_path = pickle.loads(message)
        conn_fd, status_fd = fds
        pid = os.fork()
        if pid == 0:
            self.become_worker(conn_fd, status_fd, env, output_path)
        os.close(conn_fd)
        self.status[pid] = socket.socket(fileno=status_fd)
        try:
            self.control.send(pickle.dumps((request_id, pid)))
        except OSError:
            return False
        return True

    def become_worker(
        self, conn_fd: int, status_fd: int, env: dict[str, str], output_path: str | None
    ) -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(self.wake_r)
        os.close(self.wake_w)
        os.close(status_fd)
        self.control.close()
        for sock in self.status.values():
            sock.close()
        run_child(child_main, Connection(conn_fd), env, output_path, own_thread=False)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            sock = self.status.pop(pid, None)
            if sock is None:
                continue
            try:
                sock.send(struct.pack("i", os.waitstatus_to_exitcode(status)))
            except OSError:
                pass  # the caller dropped this worker
            sock.close()


def _preload(config: dict[str, Any]) -> None:
    from tileauto.utils.imports import collector_paused

    sys.path[:] = config["sys_path"]
    # the caller's own PYTHONPATH for the workers and what they start (the server's had the
    # package's folder added, to find this module)
    if config["pythonpath"] is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = config["pythonpath"]
    with collector_paused():  # torch and TVM's compiler: see tileauto.utils.imports
        for name in config["preload"]:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a job that needs it fails with the real error
                traceback.print_exc()


def _exit_on_hangup(control: socket.socket, preloaded: threading.Event) -> None:
    """While the server preloads (seconds; a minute on a loaded machine), end it as soon as
    its caller is gone. A caller that dies while its ``Popen`` of the server is still under way
    never learns the server's pid, so nothing kills it; its loop would only see the end of
    file once the imports are done, and it would outlive its caller until then."""
    poller = select.poll()
    poller.register(control, select.POLLRDHUP)  # a hang-up and an error are always reported
    while not preloaded.is_set():
        if poller.poll(100):  # the wait is bounded only to notice the end of the preload
            os._exit(0)


def main(argv: list[str]) -> None:
    """The forkserver: ``python -m tileauto.workers.entry FD``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    # started from a caller's thread that leaves signals to its main thread: not ours to keep
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    control = socket.socket(fileno=int(argv[1]))
    message = control.recv(1 << 20)
    if not message:
        return
    preloaded = threading.Event()
    watch = threading.Thread(
        target=_exit_on_hangup, args=(control, preloaded), name="tileauto-hangup", daemon=True
    )
    watch.start()
    _preload(pickle.loads(message))
    preloaded.set()
    watch.join()  # no thread of the server's own is left when it starts forking workers
    _Server(control).run()


if __name__ == "__main__":
    # run from the imported module, not from ``__main__``: what a worker pickles (RemoteError)
    # must name the module the caller knows
    from tileauto.workers import entry as worker_entry

    worker_entry.main(sys.argv)
