"""Worker processes that can be killed: one job at a time, own process group, respawn on demand.

A worker is forked from the caller where :func:`fork_unsafe_reason` finds nothing against it
(``fork_ok`` workers, with everything the caller imported), else from the forkserver
(:mod:`tileauto.workers.forkserver`); its side is :mod:`tileauto.workers.entry`. It leads its
own process group, so a kill ends whatever the job started, and dies with its parent. A kill
never waits for the job (:meth:`Worker.kill`, from any thread). Each worker is registered in
the process-wide safety net (:mod:`tileauto.workers.safety`), which kills the live ones at exit
and on SIGTERM. Why each of these: docs/architecture.md ("Worker processes").

A worker that dies says what it can: the signal or exit code, the last lines its job wrote to
its log, and the phase the job was in (:func:`job_phase`: a program of the user's it was
running), so that the caller can blame that program rather than the job.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import pickle
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any

import psutil

from tileauto._logging import get_logger
from tileauto.cache.scratch import ScratchDir
from tileauto.errors import WorkerError
from tileauto.machine import available_memory_bytes, size_text
from tileauto.utils.threads import signals_to_main_thread
from tileauto.workers import pickling
from tileauto.workers._process_tree import (
    ForkedProcess,
    ProcessHandle,
    descendants,
    kill_all,
    kill_tree,
)
from tileauto.workers.entry import CPUS_KEY, TMP_KEY, RemoteError, child_main, run_child
from tileauto.workers.forkserver import ForkServer
from tileauto.workers.phase import PHASE_KEY, clear_phase, job_phase, phase_memory, read_phase
from tileauto.workers.safety import NET, clean_up_at_exit
from tileauto.workers.tempdirs import worker_temp_dir

log = get_logger("procs")

__all__ = [
    "RemoteError",
    "RemoteJobError",
    "Worker",
    "WorkerCancelled",
    "WorkerCrashed",
    "WorkerKilled",
    "WorkerTimeout",
    "fork_unsafe_reason",
    "job_phase",
]

_PROBE_TIMEOUT_S = 10.0
# A worker's log is cut back to its last _LOG_KEEP_BYTES once past _LOG_CAP_BYTES.
_LOG_CAP_BYTES = 16 << 20
_LOG_KEEP_BYTES = 1 << 20
_POLL_S = 0.05  # how often a running job is checked (result, death, memory, deadline, cancel)
_REAP_S = 2.0  # a SIGKILLed process is gone at once; this only bounds a stuck one
# signals that stop a process from outside (an admin's kill, a supervisor, a terminal): the
# job did not cause them, so its config is measured again another time (SIGSEGV, SIGBUS,
# SIGILL, SIGFPE, SIGABRT are the job's own: a crash)
OUTSIDE_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"})
# What a dead worker's error quotes of the output its job wrote (the log holds it all).
_TAIL_LINES = 5
_TAIL_CHARS = 1000
_FRAME = re.compile(r'File "[^"]*", line \d+, in ')  # a frame of a Python or native stack


def fork_unsafe_reason() -> str | None:
    """Why a worker cannot be forked from this process now; None when it can."""
    from tileauto.settings import Settings

    if Settings.from_env().worker_start == "forkserver":
        return "TILEAUTO_WORKER_START=forkserver"
    if NET.fork_broken is not None:
        return NET.fork_broken
    if threading.current_thread() is not threading.main_thread():
        return "not called from the main thread"
    if threading.active_count() > 1:
        names = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
        return f"other Python threads are running ({', '.join(names)})"
    if not sys.platform.startswith("linux"):
        return f"fork is used on Linux only (this is {sys.platform})"
    return None


def _probe_threads(threads: int) -> int:
    """Run an op through torch's OpenMP pool (hangs if the pool was copied by a fork)."""
    import torch

    torch.set_num_threads(max(1, threads))
    torch.ones(1 << 20).mul_(2).sum()
    return torch.get_num_threads()


class WorkerTimeout(WorkerError):
    """The job ran past its time limit; the worker and its process group were killed.

    ``phase``: the :func:`job_phase` the job was in when it was killed (None: none).
    """

    def __init__(self, message: str, phase: str | None = None):
        super().__init__(message)
        self.phase = phase


class WorkerCrashed(WorkerError):
    """The worker died while running the job (signal, exit, or killed for memory).

    ``cause``: the signal or exit code in a few words (``signal SIGABRT``, ``exit code 127``);
    ``output``: the last lines the job wrote and where its whole output is (or "");
    ``phase``: the :func:`job_phase` the job was in when it died (None: none).
    """

    def __init__(
        self,
        message: str,
        signal_name: str | None = None,
        out_of_memory: bool = False,
        *,
        cause: str = "",
        output: str = "",
        phase: str | None = None,
    ):
        super().__init__(message)
        self.signal_name = signal_name
        self.out_of_memory = out_of_memory
        self.cause = cause or message
        self.output = output
        self.phase = phase


class WorkerCancelled(WorkerError):
    """The job was stopped on purpose: the worker was killed by a cancel (:meth:`Worker.kill`
    from another thread, or the ``cancel`` event of :meth:`Worker.call`)."""


class WorkerKilled(WorkerCancelled, WorkerCrashed):
    """The worker was stopped from outside tileauto (SIGTERM, SIGINT, SIGHUP, SIGQUIT), not by
    its job: the job was cancelled (a builder or runner records it as ``cancelled``, measured
    again next time) and the worker is gone (code that replaces a crashed worker does so)."""


class RemoteJobError(WorkerError):
    """The job raised inside the worker."""

    def __init__(self, remote: RemoteError):
        super().__init__(f"{remote.type_name}: {remote.message}")
        self.remote = remote


def _settings_env() -> dict[str, str]:
    """The caller's TILEAUTO_* variables: sent with every job so workers see the same settings."""
    return {k: v for k, v in os.environ.items() if k.startswith("TILEAUTO_")}


def _forked_child(conn: Connection, caller_end: Connection, env: dict[str, str], out: Any) -> None:
    """In a worker forked from the caller: drop what belongs to the caller, then serve.

    The caller's end of this worker's pipe was copied by the fork; left open, the worker would
    not see the end of file when the caller closes its end. (The other workers' pipes and the
    forkserver's socket are closed by the fork hooks: ``NET.forget_in_child``,
    ``ForkServer.forget_in_child``.)
    """
    try:
        caller_end.close()
    except OSError:
        pass
    atexit.unregister(clean_up_at_exit)  # the parent's: its workers, its scratch
    child_main(conn, env, out, own_thread=True)


# -- the worker ------------------------------------------------------------------------------
class Worker:
    """One killable worker process. ``call`` runs a function there with a timeout.

    Args:
        name: for logs and messages.
        env: environment variables set in the worker before any job (e.g. TVM_NUM_THREADS).
        memory_limit_bytes: memory the worker may take beyond its size at start (resident set,
            its children included) before it is killed and the job reported as out of memory
            (default: 90% of the memory available at start).
        fork_ok: the worker may be forked from this process when that is safe (see the module
            docstring); it must never use a GPU, whose driver does not survive a fork.
        own_tmp: the worker's temp folder (``TMPDIR``, :mod:`tempfile`) is one of its own,
            removed when it ends (:mod:`tileauto.workers.tempdirs`): for compile workers, whose
            killed compiles leave object files there. Other workers keep the system's, where
            torch keeps its compile caches (``torchinductor_<user>``) from one run to the next.
    """

    def __init__(
        self,
        name: str,
        env: dict[str, str] | None = None,
        memory_limit_bytes: int | None = None,
        fork_ok: bool = False,
        own_tmp: bool = False,
    ):
        self.name = name
        self.env = dict(env or {})
        self.memory_limit_bytes = memory_limit_bytes or int(available_memory_bytes() * 0.9)
        self.fork_ok = fork_ok
        self.own_tmp = own_tmp
        self.start_method: str | None = None  # "fork" or "forkserver" once started
        self._proc: ProcessHandle | None = None
        self._conn: Connection | None = None
        self._tmp: ScratchDir | None = None  # its own temp folder, removed when it ends
        self._rss_at_start = 0
        self._lock = threading.RLock()  # one job (or start) at a time
        self._state = threading.Lock()  # the handles; never held while waiting
        self._running = False  # a job is in flight (its thread reaps a killed worker)
        self._killed = False  # kill() was called while the job ran: it was cancelled
        self.restarts = 0
        self.output_path: str | None = None
        self._log_start: int | None = None  # the log's size when the running job was sent
        self._phase_fd: int | None = None  # the worker's phase memory (see job_phase)
        NET.live.add(self)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    @property
    def alive(self) -> bool:
        proc = self._proc
        return proc is not None and proc.is_alive()

    @property
    def busy(self) -> bool:
        """A job is running in this worker now."""
        return self._running

    def start(self) -> Worker:
        """Start the process if it is not running (a no-op otherwise). Thread-safe."""
        with signals_to_main_thread(), self._lock:
            if self.alive:
                return self
            self._reap()
            reason = fork_unsafe_reason() if self.fork_ok else "not a fork_ok worker"
            if reason is None:
                self._start_forked()
                if self._probe_ok():
                    return self
                reason = NET.fork_broken
            log.debug("worker %s starts from the forkserver: %s", self.name, reason)
            proc, conn = ForkServer.shared().spawn(
                self.name, self._child_env(), self._output_file()
            )
            self._started(proc, conn, "forkserver")
            return self

    def _start_forked(self) -> None:
        parent, child = Pipe(duplex=True)
        out = self._output_file()
        env = self._child_env()  # here: its temp folder is made and claimed by this process
        # the child's collector leaves frozen objects alone, so it copies none of their pages
        gc.freeze()
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns on any fork of a threaded process; the other threads
                # here are native pools (OpenMP, TVM), unused by the child's own job thread
                warnings.filterwarnings(
                    "ignore", r"This process \(pid=\d+\) is multi-threaded", DeprecationWarning
                )
                pid = os.fork()
            if pid == 0:
                run_child(_forked_child, child, parent, env, out)
        finally:
            gc.unfreeze()
        child.close()
        self._started(ForkedProcess(pid), parent, "fork")

    def _started(self, proc: Any, conn: Any, method: str) -> None:
        with self._state:
            self._proc, self._conn, self.start_method = proc, conn, method
            self._killed = False
        try:
            self._rss_at_start = psutil.Process(proc.pid).memory_info().rss
        except psutil.Error:
            self._rss_at_start = 0

    def _child_env(self) -> dict[str, str]:
        """The worker's environment, the CPUs it may use (this process's: see
        :func:`tileauto.machine.process_cpus`) and its own temp folder (made here)."""
        from tileauto.machine import process_cpus

        env = dict(self.env)
        with self._state:
            if self._tmp is None and self.own_tmp:
                self._tmp = worker_temp_dir()
            if self._tmp is not None:
                env[TMP_KEY] = str(self._tmp.path)
            if self._phase_fd is None:
                self._phase_fd = phase_memory(self.name)
            if self._phase_fd is not None:  # the worker opens it through this process's /proc
                env[PHASE_KEY] = f"/proc/{os.getpid()}/fd/{self._phase_fd}"
        cpus = process_cpus()
        if cpus:
            env[CPUS_KEY] = ",".join(map(str, sorted(cpus)))
        return env

    def _probe_ok(self) -> bool:
        """Check a forked worker's OpenMP pool; on a hang, kill it and fork no more."""
        from tileauto.machine import available_cpus

        threads = int(self.env.get("OMP_NUM_THREADS") or 0) or available_cpus()
        try:
            self._exchange(_probe_threads, (threads,), _PROBE_TIMEOUT_S, None)
            return True
        except WorkerError as exc:
            NET.fork_broken = f"a worker forked from this process failed its OpenMP probe ({exc})"
            log.warning("%s; workers start from the forkserver from now on", NET.fork_broken)
            self.kill()
            self.restarts -= 1  # not a job's failure
            return False

    def call(
        self,
        fn: Callable[..., Any],
        *args: Any,
        timeout_s: float | None = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        """Run ``fn(*args)`` in the worker and return its result.

        ``cancel``: once set (from any thread), the job is stopped within ``_POLL_S`` and the
        worker killed; a job not started yet does not start.

        Raises:
            WorkerTimeout: past ``timeout_s``; the worker's process group was killed.
            WorkerCrashed: the worker died (the message names the signal or exit code).
            WorkerCancelled: ``cancel`` was set, or :meth:`kill` came from another thread.
            RemoteJobError: the function raised; ``.remote`` holds type, message and traceback.
        """
        with signals_to_main_thread(), self._lock:
            if cancel is not None and cancel.is_set():
                raise WorkerCancelled(f"cancelled before it started on worker {self.name}")
            if not self.alive:
                self.start()
            return self._exchange(fn, args, timeout_s, cancel)

    def _exchange(
        self, fn: Any, args: tuple, timeout_s: float | None, cancel: threading.Event | None
    ) -> Any:
        """Send one job to the running worker and wait for its answer (see :meth:`call`)."""
        payload = pickling.dumps((list(sys.path), _settings_env(), fn, args))
        with self._lock:
            with self._state:
                proc, conn = self._proc, self._conn
                if proc is None or conn is None or self._killed:
                    raise WorkerCancelled(f"worker {self.name} was killed before the job")
                self._running = True
            try:
                return self._wait(proc, conn, payload, timeout_s, cancel)
            except WorkerError:
                raise
            except BaseException:
                # interrupted here (Ctrl-C) with the job in flight: its answer would be taken
                # for the next job's, and nobody waits for it now
                self._kill()
                raise
            finally:
                with self._state:
                    self._running = False
                    ended = self._killed or not proc.is_alive()
                if ended:
                    self._reap()

    def _wait(
        self,
        proc: ProcessHandle,
        conn: Connection,
        payload: bytes,
        timeout_s: float | None,
        cancel: threading.Event | None,
    ) -> Any:
        clear_phase(self._phase_fd)  # what an earlier job left there is not this one's
        self._log_start = self._log_size()
        try:
            conn.send_bytes(payload)
        except OSError:
            raise self._ended(proc) from None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = (
                _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - time.monotonic()))
            )
            try:
                ready = conn.poll(wait)
            except (EOFError, OSError):
                raise self._ended(proc) from None
            if ready:
                try:
                    status, value = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    raise self._ended(proc) from None
                # what the job started and left running (a setsid child) ends with it
                kill_all(descendants(proc.pid))
                self._cap_output()
                if status == "ok":
                    return value
                raise RemoteJobError(value)
            if cancel is not None and cancel.is_set():
                self.kill()
                raise WorkerCancelled(f"cancelled; worker {self.name} was killed")
            if not proc.is_alive():
                raise self._ended(proc)
            self._cap_output()
            if self._over_memory(proc):
                self.kill()
                raise WorkerCrashed(
                    f"out of memory: worker {self.name} took more than "
                    f"{size_text(self.memory_limit_bytes)} and was killed",
                    out_of_memory=True,
                    cause=f"out of memory: more than {size_text(self.memory_limit_bytes)}",
                    phase=self._phase(),
                )
            if deadline is not None and time.monotonic() >= deadline:
                self.kill()
                raise WorkerTimeout(
                    f"timed out after {timeout_s:g} s; worker {self.name} was killed",
                    phase=self._phase(),
                )

    def kill(self) -> None:
        """Kill the worker, its whole process group and every descendant, now (any thread).

        Never waits for a job: a job running in another thread ends with
        :class:`WorkerCancelled` there, and that thread reaps the process.
        """
        if self._kill():
            self.restarts += 1

    def close(self) -> None:
        """Stop the worker and everything its jobs left running (it holds nothing worth a
        graceful exit). A job running in another thread ends with :class:`WorkerCancelled`."""
        self._kill()

    def _kill(self) -> bool:
        with self._state:
            proc = self._proc
            if proc is None:
                return False
            self._killed = True
            running = self._running
        if proc.is_alive():
            kill_tree(proc.pid)
        if not running:
            self._reap()
        return True

    def forget(self) -> None:
        """In a child forked from the caller: the worker is the caller's. Close the copies of
        its pipe and of its temp folder's claim (the caller's holds it) and drop its handles;
        nothing is killed or removed (see ``NET.forget_in_child``)."""
        conn, tmp, phase = self._conn, self._tmp, self._phase_fd
        self._proc, self._conn, self._tmp, self._phase_fd = None, None, None, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()
        if tmp is not None:
            tmp.release()
        if phase is not None:
            with contextlib.suppress(OSError):
                os.close(phase)

    def _reap(self) -> None:
        # kill() from another thread (a cancel) may race the job's thread that saw the worker
        # die: each takes the handles out under the lock, so only one of them closes them
        with self._state:
            proc, conn, tmp, phase = self._proc, self._conn, self._tmp, self._phase_fd
            self._proc, self._conn, self._tmp, self._phase_fd = None, None, None, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()
        if phase is not None:  # the next worker gets its own
            with contextlib.suppress(OSError):
                os.close(phase)
        if proc is not None:
            proc.join(timeout=_REAP_S)
        if tmp is not None:  # what its jobs left there: a killed compile's object files
            tmp.remove()

    def _over_memory(self, proc: ProcessHandle) -> bool:
        try:
            ps = psutil.Process(proc.pid)
            rss = ps.memory_info().rss + sum(
                c.memory_info().rss for c in ps.children(recursive=True)
            )
        except psutil.Error:
            return False
        return rss - self._rss_at_start > self.memory_limit_bytes

    def _output_file(self) -> str | None:
        """A private log file for this worker's output, under the settings' log directory."""
        try:
            from tileauto.cache.hygiene import worker_log_name
            from tileauto.settings import Settings

            folder = Settings.from_env().logs_dir / "workers"
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = str(folder / worker_log_name(self.name, os.getpid()))
            # opened here first: a folder that exists but cannot be written (a read-only
            # cache) must not be found out by the worker, which could only die of it
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            self.output_path = path
        except Exception:  # noqa: BLE001 - no log dir: the output goes to our stderr
            self.output_path = None
        return self.output_path

    def _cap_output(self) -> None:
        """Cut the worker's log back to its tail once it grows past ``_LOG_CAP_BYTES``.

        The worker appends (``O_APPEND``), so its next write lands at the new end; a job that
        prints without end keeps a log of a bounded size.
        """
        if not self.output_path:
            return
        try:
            size = os.stat(self.output_path).st_size
            if size <= _LOG_CAP_BYTES:
                return
            header = b"[tileauto: earlier output dropped, the log is capped]\n"
            with open(self.output_path, "r+b") as f:
                f.seek(size - _LOG_KEEP_BYTES)
                tail = f.read(_LOG_KEEP_BYTES)
                f.seek(0)
                f.write(header + tail)
                f.truncate()
            if self._log_start is not None:  # where the running job's output now starts
                kept_from = size - _LOG_KEEP_BYTES
                self._log_start = len(header) + max(0, self._log_start - kept_from)
        except OSError:
            pass

    def _log_size(self) -> int | None:
        """The size of the worker's log now (None without one)."""
        if not self.output_path:
            return None
        try:
            return os.stat(self.output_path).st_size
        except OSError:
            return None

    def _last_output(self) -> str:
        """What a dead worker's error quotes: the last lines its job wrote (at most
        ``_TAIL_LINES`` lines, ``_TAIL_CHARS`` characters, on one line), and where the whole
        log is; "" without a log.

        Only what came after the job was sent: the log is shared by the worker's earlier
        lives, and its earlier jobs' output is not this death's.
        """
        path, start = self.output_path, self._log_start
        if not path:
            return ""
        where = f" (worker output: {path})"
        try:
            with open(path, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                begin = max(start, end - 4 * _TAIL_CHARS) if start is not None else end
                f.seek(min(begin, end))
                data = f.read(max(0, end - begin))
        except OSError:
            return where
        lines = [line.strip() for line in data.decode(errors="replace").splitlines()]
        # a stack's frames say where the crash went through (thread_run, clone3...), not what
        # it was: the lines around them do ("Segfault encountered", "undefined symbol: ...")
        said = [line for line in lines if line and not _FRAME.match(line)]
        text = " | ".join(said[-_TAIL_LINES:])
        if len(text) > _TAIL_CHARS:
            text = "..." + text[-_TAIL_CHARS:]
        return f"; its last output: {text}{where}" if text else where

    def _phase(self) -> str | None:
        """The :func:`job_phase` the worker was in (read once it is dead or killed)."""
        return read_phase(self._phase_fd)

    def _ended(self, proc: ProcessHandle) -> WorkerError:
        """The error for a job whose worker is gone: cancelled (our kill) or crashed."""
        proc.join(timeout=_REAP_S)
        if self._killed:
            return WorkerCancelled(f"cancelled; worker {self.name} was killed")
        self.restarts += 1
        code = proc.exitcode
        where = f" (worker output: {self.output_path})" if self.output_path else ""
        phase = self._phase()
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            if name in OUTSIDE_SIGNALS:
                return WorkerKilled(
                    f"killed by {name} from outside tileauto (not the config's doing; it is "
                    f"measured again next time){where}",
                    signal_name=name,
                )
            # nobody here sent it: the kernel's out-of-memory killer is the usual sender
            oom = name == "SIGKILL"
            hint = " (killed by SIGKILL: likely out of memory)" if oom else ""
            output = self._last_output()
            return WorkerCrashed(
                f"crashed with signal {name}{hint}{output}",
                signal_name=name,
                out_of_memory=oom,
                cause=f"signal {name}{', likely out of memory' if oom else ''}",
                output=output,
                phase=phase,
            )
        output = self._last_output()
        return WorkerCrashed(
            f"worker exited with code {code}{output}",
            cause=f"exit code {code}",
            output=output,
            phase=phase,
        )
