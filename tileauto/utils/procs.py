"""Worker processes that can be killed: one job at a time, own process group, respawn on demand.

A worker starts one of two ways:

- *forked from the caller* (``fork_ok`` workers, when :func:`fork_unsafe_reason` finds nothing
  against it): ready in milliseconds, with TVM, torch and the user's modules already imported.
  The fork must come from the main thread with no other Python thread running (one could hold
  a lock the child would find locked). The thread pools of OpenMP (torch) and TVM do not
  survive a fork: they belong to the thread that started them, and a child that used the
  copied state would wait forever for threads that were not copied. So a forked worker runs
  its jobs in a new thread, which starts pools of its own, and first runs a probe through
  OpenMP (if that hangs, the process uses the forkserver from then on);
- otherwise from a multiprocessing *forkserver*, a fresh interpreter that imported TVM and
  torch once and runs no torch op (a few seconds to boot, once per process; later workers fork
  from it in tens of milliseconds).

Each worker leads its own process group so a timeout kills the job together with anything it
started (g++, for instance), and it dies with its parent (``PR_SET_PDEATHSIG``). Jobs travel as
cloudpickle bytes; results come back as pickles.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import multiprocessing
import multiprocessing.spawn as mp_spawn
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import cloudpickle
import psutil

from tileauto._logging import get_logger
from tileauto.errors import WorkerError

log = get_logger("procs")

_PRELOAD = ["tileauto.utils.worker_preload"]
_LIVE: weakref.WeakSet[Worker] = weakref.WeakSet()
_CTX_LOCK = threading.Lock()
_CTX: Any = None
_START_LOCK = threading.Lock()


# Set when a forked worker failed its probe: this process forks no more workers.
_FORK_BROKEN: str | None = None
_PROBE_TIMEOUT_S = 10.0
# A worker's log is cut back to its last _LOG_KEEP_BYTES once past _LOG_CAP_BYTES.
_LOG_CAP_BYTES = 16 << 20
_LOG_KEEP_BYTES = 1 << 20


def _context() -> Any:
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            _CTX = ctx
        return _CTX


def fork_unsafe_reason() -> str | None:
    """Why a worker cannot be forked from this process now; None when it can."""
    from tileauto.settings import Settings

    if Settings.from_env().worker_start == "forkserver":
        return "TILEAUTO_WORKER_START=forkserver"
    if _FORK_BROKEN is not None:
        return _FORK_BROKEN
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


def _start_without_main(proc: Any) -> None:
    """Start ``proc`` without re-importing the user's ``__main__`` in the child.

    multiprocessing re-runs the main script in every child, so a script without an
    ``if __name__ == "__main__":`` guard would tune again inside the worker. Jobs arrive as
    cloudpickle bytes (functions from ``__main__`` travel by value), so the child never needs it.
    """
    with _START_LOCK:
        original = mp_spawn.get_preparation_data

        def preparation_data(name: str) -> dict[str, Any]:
            data = original(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        mp_spawn.get_preparation_data = preparation_data
        try:
            proc.start()
        finally:
            mp_spawn.get_preparation_data = original


class WorkerTimeout(WorkerError):
    """The job ran past its time limit; the worker and its process group were killed."""


class WorkerCrashed(WorkerError):
    """The worker died while running the job (signal, exit, or killed for memory)."""

    def __init__(self, message: str, signal_name: str | None = None, out_of_memory: bool = False):
        super().__init__(message)
        self.signal_name = signal_name
        self.out_of_memory = out_of_memory


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


def _set_pdeathsig() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
        # PR_SET_CHILD_SUBREAPER: orphans of the job (a daemonized child) stay our descendants,
        # so that killing the worker finds and kills them too
        libc.prctl(36, 1)
    except OSError:  # pragma: no cover - non-glibc systems
        pass


def _descendants(pid: int) -> list[psutil.Process]:
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


def _kill_all(processes: list[psutil.Process]) -> None:
    for proc in processes:
        try:
            proc.kill()  # psutil checks the creation time: a reused pid is left alone
        except psutil.Error:
            pass


def _settings_env() -> dict[str, str]:
    """The caller's TILEAUTO_* variables: sent with every job so workers see the same settings."""
    return {k: v for k, v in os.environ.items() if k.startswith("TILEAUTO_")}


def _apply_settings_env(env: dict[str, str], base: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith("TILEAUTO_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    os.environ.update(base)  # the worker's own variables win


def _redirect_output(path: str | None) -> None:
    """Send the worker's stdout/stderr (TVM's crash traces, compiler chatter) to its log file."""
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _forked_child_setup(caller_end: Any) -> None:
    """In a worker forked from the caller: drop what belongs to the caller.

    The caller's ends of this worker's pipe and of the other workers' pipes were copied by the
    fork; left open, a worker would not see the end of file when the caller closes its pipe.
    """
    for end in [caller_end, *(worker._conn for worker in list(_LIVE))]:
        if end is not None:
            try:
                end.close()
            except OSError:
                pass
    for worker in list(_LIVE):
        worker._proc, worker._conn = None, None
    _LIVE.clear()
    atexit.unregister(shutdown_all)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _set_torch_threads(env: dict[str, str]) -> None:
    """Apply OMP_NUM_THREADS to torch in this thread (OpenMP's setting is per thread)."""
    torch = sys.modules.get("torch")
    threads = env.get("OMP_NUM_THREADS")
    if torch is not None and threads:
        torch.set_num_threads(max(1, int(threads)))


def _child_main(
    conn: Any, env: dict[str, str], output_path: str | None = None, caller_end: Any = None
) -> None:
    """The worker's loop. ``caller_end`` is given when forked from the caller (see above)."""
    os.setpgid(0, 0)
    _set_pdeathsig()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C goes to it
    os.environ.update(env)
    _redirect_output(output_path)
    if caller_end is None:
        _serve(conn, env)
        return
    _forked_child_setup(caller_end)
    # The thread pools of OpenMP and TVM belong to the thread that started them, and the
    # caller's were not copied by the fork: jobs run in a new thread, which starts its own.
    jobs = threading.Thread(target=_serve, args=(conn, env, True), name="tileauto-jobs")
    jobs.start()
    jobs.join()


def _serve(conn: Any, env: dict[str, str], set_threads: bool = False) -> None:
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
            data = pickle.dumps(result)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps(
                ("error", RemoteError(type(exc).__name__, f"result not picklable: {exc}", ""))
            )
        conn.send_bytes(data)


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
    """

    def __init__(
        self,
        name: str,
        env: dict[str, str] | None = None,
        memory_limit_bytes: int | None = None,
        fork_ok: bool = False,
    ):
        self.name = name
        self.env = dict(env or {})
        self.memory_limit_bytes = memory_limit_bytes or int(psutil.virtual_memory().available * 0.9)
        self.fork_ok = fork_ok
        self.start_method: str | None = None  # "fork" or "forkserver" once started
        self._proc: Any = None
        self._conn: Any = None
        self._rss_at_start = 0
        self._lock = threading.RLock()  # start() may run in a background thread
        self._reap_lock = threading.Lock()
        self.restarts = 0
        self.output_path: str | None = None
        _LIVE.add(self)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self) -> Worker:
        """Start the process if it is not running (a no-op otherwise). Thread-safe."""
        with self._lock:
            if self.alive:
                return self
            self._reap()
            reason = fork_unsafe_reason() if self.fork_ok else "not a fork_ok worker"
            if reason is None:
                self._start_forked()
                if self._probe_ok():
                    return self
                reason = _FORK_BROKEN
            log.debug("worker %s starts from the forkserver: %s", self.name, reason)
            ctx = _context()
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=_child_main,
                args=(child, self.env, self._output_file()),
                name=f"tileauto-{self.name}",
                daemon=True,
            )
            _start_without_main(proc)
            child.close()
            self._started(proc, parent, "forkserver")
            return self

    def _start_forked(self) -> None:
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_child_main,
            args=(child, self.env, self._output_file(), parent),
            name=f"tileauto-{self.name}",
            daemon=True,
        )
        # The child would otherwise copy-on-write every page the collector touches; frozen
        # objects are left alone there (the parent thaws at once).
        gc.freeze()
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns on any fork of a threaded process. The only other
                # threads here are native ones, typically the pools of OpenMP, TVM or OpenBLAS,
                # whose state a forked worker does not use: its jobs run in a thread of its own.
                warnings.filterwarnings(
                    "ignore", r"This process \(pid=\d+\) is multi-threaded", DeprecationWarning
                )
                proc.start()
        finally:
            gc.unfreeze()
        child.close()
        self._started(proc, parent, "fork")

    def _started(self, proc: Any, conn: Any, method: str) -> None:
        self._proc, self._conn, self.start_method = proc, conn, method
        try:
            self._rss_at_start = psutil.Process(proc.pid).memory_info().rss
        except psutil.Error:
            self._rss_at_start = 0

    def _probe_ok(self) -> bool:
        """Check a forked worker's OpenMP pool; on a hang, kill it and fork no more."""
        global _FORK_BROKEN
        threads = int(self.env.get("OMP_NUM_THREADS") or 0) or len(os.sched_getaffinity(0))
        try:
            self._exchange(_probe_threads, (threads,), _PROBE_TIMEOUT_S)
            return True
        except WorkerError as exc:
            _FORK_BROKEN = f"a worker forked from this process failed its OpenMP probe ({exc})"
            log.warning("%s; workers start from the forkserver from now on", _FORK_BROKEN)
            self.kill()
            self.restarts -= 1  # not a job's failure
            return False

    def call(self, fn: Any, *args: Any, timeout_s: float | None = None) -> Any:
        """Run ``fn(*args)`` in the worker and return its result.

        Raises:
            WorkerTimeout: past ``timeout_s``; the worker's process group was killed.
            WorkerCrashed: the worker died (the message names the signal or exit code).
            RemoteJobError: the function raised; ``.remote`` holds type, message and traceback.
        """
        with self._lock:
            if not self.alive:
                self.start()
            return self._exchange(fn, args, timeout_s)

    def _exchange(self, fn: Any, args: tuple, timeout_s: float | None) -> Any:
        """Send one job to the running worker and wait for its answer (see :meth:`call`)."""
        with self._lock:
            try:
                self._conn.send_bytes(
                    cloudpickle.dumps((list(sys.path), _settings_env(), fn, args))
                )
            except (BrokenPipeError, OSError):
                raise self._crashed() from None
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while True:
                wait = (
                    0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
                )
                try:
                    ready = self._conn.poll(wait)
                except (EOFError, OSError):
                    raise self._crashed() from None
                if ready:
                    try:
                        status, value = pickle.loads(self._conn.recv_bytes())
                    except (EOFError, OSError):
                        raise self._crashed() from None
                    # what the job started and left running (a setsid child) ends with it
                    _kill_all(_descendants(self._proc.pid))
                    self._cap_output()
                    if status == "ok":
                        return value
                    raise RemoteJobError(value)
                if not self._proc.is_alive():
                    raise self._crashed()
                self._cap_output()
                if self._over_memory():
                    self.kill()
                    raise WorkerCrashed(
                        f"out of memory: worker {self.name} took more than {self.memory_limit_bytes / 2**30:.1f} GiB and was killed",
                        out_of_memory=True,
                    )
                if deadline is not None and time.monotonic() >= deadline:
                    self.kill()
                    raise WorkerTimeout(
                        f"timed out after {timeout_s:g} s; worker {self.name} was killed"
                    )

    def kill(self) -> None:
        """Kill the worker, its whole process group and every descendant (setsid ones too)."""
        proc = self._proc
        if proc is None:
            return
        # walked before the worker dies (afterwards its orphans belong to init, out of reach),
        # with the worker stopped so that it starts nothing new meanwhile
        try:
            os.kill(proc.pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError, TypeError):
            pass
        descendants = _descendants(proc.pid)
        for kill in (
            lambda: os.killpg(proc.pid, signal.SIGKILL),
            lambda: os.kill(proc.pid, signal.SIGKILL),
        ):
            try:
                kill()
            except (ProcessLookupError, PermissionError, TypeError):
                pass
        _kill_all(descendants)
        self._reap()
        self.restarts += 1

    def close(self) -> None:
        """Stop the worker (politely, then by force)."""
        proc = self._proc
        if proc is None:
            return
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        try:
            self._conn.close()
        except OSError:
            pass
        proc.join(timeout=1.0)
        if proc.is_alive():
            self.kill()
        _kill_all(descendants)  # what the jobs left running ends with the worker
        self._reap()

    def _reap(self) -> None:
        # kill() from the caller's thread (a cancel) may race a job thread that saw the worker
        # die: each takes the handles out under the lock, so only one of them closes them
        with self._reap_lock:
            proc, conn = self._proc, self._conn
            self._proc, self._conn = None, None
        if proc is not None:
            proc.join(timeout=5.0)
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass

    def _over_memory(self) -> bool:
        try:
            proc = psutil.Process(self._proc.pid)
            rss = proc.memory_info().rss + sum(
                c.memory_info().rss for c in proc.children(recursive=True)
            )
        except psutil.Error:
            return False
        return rss - self._rss_at_start > self.memory_limit_bytes

    def _output_file(self) -> str | None:
        """A private log file for this worker's output, under the settings' log directory."""
        try:
            from tileauto.settings import Settings

            folder = Settings.from_env().logs_dir / "workers"
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.output_path = str(folder / f"{self.name}-{os.getpid()}.log")
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
            with open(self.output_path, "r+b") as f:
                f.seek(size - _LOG_KEEP_BYTES)
                tail = f.read(_LOG_KEEP_BYTES)
                f.seek(0)
                f.write(b"[tileauto: earlier output dropped, the log is capped]\n" + tail)
                f.truncate()
        except OSError:
            pass

    def output_tail(self, lines: int = 3) -> str:
        """The last lines the worker printed (e.g. the signal report of a crash)."""
        if not self.output_path:
            return ""
        try:
            with open(self.output_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 8192))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return " | ".join(kept[-lines:])

    def _crashed(self) -> WorkerCrashed:
        proc = self._proc
        proc.join(timeout=2.0)
        code = proc.exitcode
        self._reap()
        self.restarts += 1
        where = f" (worker output: {self.output_path})" if self.output_path else ""
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            oom = name == "SIGKILL"
            hint = " (killed by SIGKILL: likely out of memory)" if oom else ""
            return WorkerCrashed(
                f"crashed with signal {name}{hint}{where}", signal_name=name, out_of_memory=oom
            )
        return WorkerCrashed(f"worker exited with code {code}{where}")


class RemoteJobError(WorkerError):
    """The job raised inside the worker."""

    def __init__(self, remote: RemoteError):
        super().__init__(f"{remote.type_name}: {remote.message}")
        self.remote = remote


def shutdown_all() -> None:
    """Kill every live worker (at exit, and on errors or Ctrl-C in the tuner)."""
    for worker in list(_LIVE):
        try:
            worker.kill() if worker.alive else worker._reap()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(shutdown_all)
