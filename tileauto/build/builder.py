"""Compile many configs of one factory in parallel, each in a killable worker (or a thread).

``Builder.build`` takes index-aligned :class:`BuildRequest` s and returns index-aligned
:class:`BuildResult` s; a failure is a result with a status and the compiler's message, never
an exception, so one bad config cannot stop the batch.

Statuses say whether a failure belongs to the config or to the moment: ``compile_error`` and
``compile_crash`` (the compiler died of a signal such as SIGSEGV) are the config's and may be
remembered; ``compile_timeout``, ``compile_out_of_memory`` (a MemoryError, the memory limit,
or a SIGKILL nobody here sent: the kernel's out-of-memory killer) and ``cancelled`` (killed by
:meth:`Builder.cancel`, an interrupt) depend on the machine's state and are worth trying again.

A build borrows its workers from a :class:`~tileauto.workers.pool.WorkerPool` (the process's
shared one by default) and never waits for a compile it gave up on: a cancel kills the
workers running this build's compiles, and only those.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.build.driver import SlotStage
from tileauto.build.job import compile_job, error_text, memory_error
from tileauto.options import CompileArgs
from tileauto.records import BuildRequest, BuildResult, BuildStatus
from tileauto.utils.threads import signals_to_main_thread
from tileauto.workers.pool import WorkerPool
from tileauto.workers.procs import (
    RemoteJobError,
    Worker,
    WorkerCancelled,
    WorkerCrashed,
    WorkerTimeout,
    fork_unsafe_reason,
)
from tileauto.workers.safety import kill_workers_on_sigterm

log = get_logger("builder")


def compile_workers(n: int) -> list[Worker]:
    """The shared pool's first ``n`` compile workers, made if missing (for tests and benches:
    a :class:`Builder` leases its own from its pool)."""
    return WorkerPool.shared().grow(n)


class Builder(SlotStage):
    """Compiles configs of ``factory`` in parallel (the local build stage).

    A build leases its workers from ``pool`` and gives them back as it ends, so that
    :meth:`cancel` kills only the workers running this builder's jobs; concurrent builders
    that share a pool do not touch each other's compiles.

    Args:
        factory: the kernel factory (shipped to workers with cloudpickle).
        compile_args: target, out_idx and pass options.
        workers: parallel compile jobs.
        isolation: ``"process"`` (killable workers) or ``"thread"`` (threads of this process;
            no kill on timeout or cancel, but no worker start-up either).
        timeout_s: per-config compile limit (process isolation kills the worker past it).
        staging_dir: where artifacts are written (one folder per build).
        pool: the workers to borrow (default: the process's :meth:`WorkerPool.shared`).
    """

    def __init__(
        self,
        factory: Callable[..., Any],
        compile_args: CompileArgs,
        *,
        workers: int,
        isolation: str = "process",
        timeout_s: float = 300.0,
        staging_dir: Path,
        pool: WorkerPool | None = None,
    ) -> None:
        if isolation not in ("process", "thread"):
            raise ValueError(f"isolation must be 'process' or 'thread', got {isolation!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.factory = factory
        self.compile_args = compile_args
        self.workers = workers
        self.isolation = isolation
        self.timeout_s = timeout_s
        self.staging_dir = Path(staging_dir)
        self.pool = pool
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._leased: set[Worker] = set()  # lent to this builder's builds now
        self._waiting: set[threading.Condition] = set()  # builds to wake up on a cancel
        self._signals = contextlib.ExitStack()  # the SIGTERM handler, from start to close
        self._armed = False

    # -- the build stage (tileauto.tune.stages.BuildStage) ----------------------------------------
    def start(self) -> None:
        """Get ready on the caller's thread, before any other thread starts.

        Forks the compile workers from this process when :meth:`fork_unsafe_reason` allows
        (otherwise they start from the forkserver with their first job), and until
        :meth:`close` makes a SIGTERM kill the workers and what they started before the
        process ends (see :func:`tileauto.workers.safety.kill_workers_on_sigterm`).
        """
        self.start_workers()

    def start_workers(self) -> bool:
        """:meth:`start`; True if the workers were forked from this process."""
        if not self._armed:
            self._signals.enter_context(kill_workers_on_sigterm())
            self._armed = True
        reason = self.fork_unsafe_reason()
        if reason is not None:
            log.debug("compile workers start from the forkserver: %s", reason)
            return False
        if self.isolation == "process":
            self._pool().start_forked(self.workers)
        return True

    def close(self) -> None:
        """Release what the builder holds: the workers forked from this process (call it when
        the build ends; see :meth:`WorkerPool.close_forked`). Forkserver workers stay up."""
        if self.isolation == "process":
            self._pool().close_forked()
        self._signals.close()
        self._armed = False

    def cancel(self) -> None:
        """Stop this builder's builds now: no new compile starts, and the workers running its
        compiles are killed (their results: ``CANCELLED``). Other builders' compiles go on.
        Later builds of this builder return every request as ``CANCELLED``. Any thread.
        """
        self._cancelled.set()
        with self._lock:
            busy = [w for w in self._leased if w.busy]
        for worker in busy:
            worker.kill()
        self._wake_builds()

    def fork_unsafe_reason(self) -> str | None:
        """Why workers for this build cannot be forked from this process now (None: they can).

        Forking the caller, which has TVM, torch and the user's modules imported, makes a
        worker ready in milliseconds instead of the seconds a fresh interpreter takes to import
        them; it is done for CPU targets only (a GPU driver does not survive a fork), and when
        :func:`tileauto.workers.procs.fork_unsafe_reason` finds nothing against it.
        """
        from tileauto.jit.target_memo import resolve
        from tileauto.utils.imports import collector_paused

        ca = self.compile_args
        try:
            # the memo answers without TVM's compiler: a build served by the kernel cache
            # never imports it; on a miss, this is the tuning process's first import of TVM
            with collector_paused():
                cpu = resolve(ca.target, ca.target_host).device_type == "cpu"
        except Exception:  # noqa: BLE001 - a bad target fails in the compile, with its message
            return "the target cannot be resolved"
        return fork_unsafe_reason() if cpu else "a GPU target"

    def build(
        self,
        requests: Sequence[BuildRequest],
        on_result: Callable[[BuildResult], None] | None = None,
    ) -> None:
        """Compile every request; ``on_result`` gets each result (from a driver thread) as
        its build finishes, so a caller can start running kernels before the batch is
        complete (:func:`~tileauto.build.job.build_all` returns them as a list). After a
        :meth:`cancel` (or an interrupt of this call), every request not finished is
        ``CANCELLED``; this call returns at once and never waits for a compile in flight.
        """
        if not requests:
            return
        with signals_to_main_thread():  # a build waited for in another thread leaves Ctrl-C
            self._build(requests, on_result)  # to the main one

    def _build(
        self,
        requests: Sequence[BuildRequest],
        on_result: Callable[[BuildResult], None] | None,
    ) -> list[BuildResult]:
        n = min(self.workers, len(requests))
        slots: list[_WorkerSlot | _ThreadSlot] = (
            [_WorkerSlot(self, w) for w in self._lease(n)]
            if self.isolation == "process"
            else [_ThreadSlot(self) for _ in range(n)]
        )
        return self._drive(requests, slots, on_result)

    # -- drivers -----------------------------------------------------------------------------
    def _pool(self) -> WorkerPool:
        if self.pool is None:
            self.pool = WorkerPool.shared()
        return self.pool

    def _lease(self, n: int) -> list[Worker]:
        workers = self._pool().lease(n)
        with self._lock:
            self._leased.update(workers)
        return workers

    def _give_back(self, worker: Worker) -> None:
        with self._lock:
            self._leased.discard(worker)
        self._pool().give_back(worker)

    def _in_worker(self, worker: Worker, request: BuildRequest, out_dir: str) -> KernelArtifact:
        return worker.call(
            compile_job,
            self.factory,
            request,
            self.compile_args,
            out_dir,
            timeout_s=self.timeout_s,
            cancel=self._cancelled,
        )

    def _in_thread(self, request: BuildRequest, out_dir: str) -> KernelArtifact:
        return compile_job(self.factory, request, self.compile_args, out_dir)

    def _build_one(
        self,
        request: BuildRequest,
        run_one: Callable[[BuildRequest, str], KernelArtifact],
        out_dir: str,
    ) -> BuildResult:
        start = time.perf_counter()
        status, artifact, error = BuildStatus.OK, None, None
        try:
            artifact = run_one(request, out_dir)
        except WorkerTimeout as exc:
            status, error = BuildStatus.TIMEOUT, f"compile {exc}"
        except WorkerCancelled as exc:
            status, error = BuildStatus.CANCELLED, f"compile {exc}"
        except WorkerCrashed as exc:
            oom = exc.out_of_memory
            status = BuildStatus.OUT_OF_MEMORY if oom else BuildStatus.CRASH
            error = f"compiler {exc}"
        except RemoteJobError as exc:
            oom = memory_error(exc.remote.type_name, exc.remote.message)
            status = BuildStatus.OUT_OF_MEMORY if oom else BuildStatus.ERROR
            error = error_text(exc.remote.type_name, exc.remote.message)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - thread mode: the compile's own
            # (a factory's sys.exit is its config's failure; Ctrl-C still ends the build)
            oom = memory_error(type(exc).__name__, str(exc))
            status = BuildStatus.OUT_OF_MEMORY if oom else BuildStatus.ERROR
            error = error_text(type(exc).__name__, str(exc))
        wall = time.perf_counter() - start
        if error is not None:
            log.info("config %s failed to compile: %s", request.config, error.splitlines()[0])
        compile_s = (artifact.compile_s + artifact.export_s) if artifact else wall
        return BuildResult(
            index=request.index,
            config=request.config,
            status=status,
            artifact=artifact,
            error=error,
            compile_s=compile_s,
        )


class _WorkerSlot:
    """A leased compile worker: compiles in it, gives it back as the build ends."""

    def __init__(self, builder: Builder, worker: Worker) -> None:
        self.builder, self.worker = builder, worker

    def compile(self, request: BuildRequest, out_dir: str) -> BuildResult:
        run_one = functools.partial(self.builder._in_worker, self.worker)
        return self.builder._build_one(request, run_one, out_dir)

    def release(self) -> None:
        self.builder._give_back(self.worker)


class _ThreadSlot:
    """A thread of this process (``isolation="thread"``): nothing to give back."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder

    def compile(self, request: BuildRequest, out_dir: str) -> BuildResult:
        return self.builder._build_one(request, self.builder._in_thread, out_dir)

    def release(self) -> None:
        pass
