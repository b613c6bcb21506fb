"""Compile many configs of one factory in parallel, each in a killable worker (or a thread).

``Builder.build`` takes index-aligned :class:`BuildRequest` s and returns index-aligned
:class:`BuildResult` s; a failure is a result with a status and the compiler's message, never
an exception, so one bad config cannot stop the batch.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import functools
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.options import CompileArgs
from tileauto.space import merged_pass_configs, split_pass_configs
from tileauto.utils.procs import (
    RemoteJobError,
    Worker,
    WorkerCrashed,
    WorkerTimeout,
    fork_unsafe_reason,
)

log = get_logger("builder")


class BuildStatus(enum.Enum):
    """How a compile ended."""

    OK = "ok"
    ERROR = "compile_error"
    TIMEOUT = "compile_timeout"
    CRASH = "compile_crash"


@dataclass(frozen=True)
class BuildRequest:
    """One config to compile: ``factory(*args, **kwargs)`` with the config merged into kwargs."""

    index: int
    config: dict[str, Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuildResult:
    """The outcome of one BuildRequest, at the same index."""

    index: int
    config: dict[str, Any]
    status: BuildStatus
    artifact: KernelArtifact | None = None
    error: str | None = None
    compile_s: float = 0.0
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is BuildStatus.OK


def _compile_job(
    factory: Callable[..., Any], request: BuildRequest, compile_args: CompileArgs, out_dir: str
) -> KernelArtifact:
    from tileauto.jit.compiler import compile_to_dir

    arguments, own = split_pass_configs(request.config)
    if own:  # a config's own TVM pass options, over the call's
        compile_args = dataclasses.replace(
            compile_args, pass_configs=merged_pass_configs(compile_args.pass_configs, own)
        )
    kwargs = {**request.kwargs, **arguments}
    return compile_to_dir(
        factory, request.args, kwargs, compile_args, Path(out_dir), config=request.config
    )


_POOL_LOCK = threading.Lock()
_POOL: list[Worker] = []


def compile_workers(n: int) -> list[Worker]:
    """The process-wide compile workers (kept alive between batches), at least ``n`` of them."""
    with _POOL_LOCK:
        while len(_POOL) < n:
            _POOL.append(
                Worker(
                    f"compile-{len(_POOL)}", env={"TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
                )
            )
        return _POOL[:n]


def first_lines(text: str, n: int = 6) -> str:
    """The first non-empty lines of a message (compiler errors are long)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    head = "\n".join(lines[:n])
    return head + (f"\n... ({len(lines) - n} more lines)" if len(lines) > n else "")


class Builder:
    """Compiles configs of ``factory`` in parallel.

    Args:
        factory: the kernel factory (shipped to workers with cloudpickle).
        compile_args: target, out_idx and pass options.
        workers: parallel compile jobs.
        isolation: ``"process"`` (killable workers) or ``"thread"`` (threads of this process;
            no kill on timeout, but no worker start-up either).
        timeout_s: per-config compile limit (process isolation kills the worker past it).
        staging_dir: where artifacts are written (one folder per build).
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
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop the batch: no new job starts, and running compiles are killed."""
        self._cancelled.set()
        if self.isolation == "process":
            for worker in compile_workers(self.workers):
                worker.kill()

    def fork_unsafe_reason(self) -> str | None:
        """Why workers for this build cannot be forked from this process now (None: they can).

        Forking the caller, which has TVM, torch and the user's modules imported, makes a
        worker ready in milliseconds instead of the seconds a fresh interpreter takes to import
        them; it is done for CPU targets only (a GPU driver does not survive a fork), and when
        :func:`tileauto.utils.procs.fork_unsafe_reason` finds nothing against it.
        """
        from tileauto.jit.target import device_type_of, resolve_target

        ca = self.compile_args
        try:
            cpu = device_type_of(resolve_target(ca.target, ca.target_host)) == "cpu"
        except Exception:  # noqa: BLE001 - a bad target fails in the compile, with its message
            return "the target cannot be resolved"
        return fork_unsafe_reason() if cpu else "a GPU target"

    def close_forked_workers(self) -> None:
        """Stop the workers that were forked from this process (call it when the build ends).

        A forked worker shares the caller's memory as it was at the fork: kept alive, it would
        keep memory the caller has since freed (a model's weights, say) from going back to the
        system. Forking again for the next build costs milliseconds. Workers from the
        forkserver stay up between builds.
        """
        for worker in compile_workers(self.workers):
            if worker.start_method == "fork" and worker.alive:
                worker.close()

    def start_workers(self) -> bool:
        """Fork the compile workers now if :meth:`fork_unsafe_reason` allows; True if it did.

        Call it from the main thread before starting any other. Otherwise the workers start
        from the forkserver with their first job.
        """
        reason = self.fork_unsafe_reason()
        if reason is not None:
            log.debug("compile workers start from the forkserver: %s", reason)
            return False
        if self.isolation == "process":
            for worker in compile_workers(self.workers):
                if not worker.alive:
                    worker.fork_ok = True
                    worker.start()
        return True

    def build(
        self,
        requests: Sequence[BuildRequest],
        on_result: Callable[[BuildResult], None] | None = None,
    ) -> list[BuildResult]:
        """Compile every request; results are index-aligned with ``requests``.

        ``on_result`` is called (from a driver thread) as each build finishes, so a caller
        can start running kernels before the batch is complete.
        """
        batch_dir = self.staging_dir / f"build-{uuid.uuid4().hex[:12]}"
        results: list[BuildResult | None] = [None] * len(requests)
        jobs: queue.Queue[int] = queue.Queue()
        for i in range(len(requests)):
            jobs.put(i)

        def finish(i: int, result: BuildResult) -> None:
            results[i] = result
            if on_result is not None:
                on_result(result)

        def drive(run_one: Callable[[BuildRequest, str], KernelArtifact]) -> None:
            while not self._cancelled.is_set():
                try:
                    i = jobs.get_nowait()
                except queue.Empty:
                    return
                finish(i, self._build_one(requests[i], run_one, str(batch_dir / f"{i:04d}")))

        if self.isolation == "process":
            pool = compile_workers(self.workers)
            drivers = [
                functools.partial(drive, functools.partial(self._in_worker, w)) for w in pool
            ]
        else:
            drivers = [functools.partial(drive, self._in_thread) for _ in range(self.workers)]
        with concurrent.futures.ThreadPoolExecutor(
            len(drivers), thread_name_prefix="tileauto-build"
        ) as ex:
            for fut in [ex.submit(d) for d in drivers]:
                fut.result()
        return [r for r in results if r is not None]

    def _in_worker(self, worker: Worker, request: BuildRequest, out_dir: str) -> KernelArtifact:
        return worker.call(
            _compile_job,
            self.factory,
            request,
            self.compile_args,
            out_dir,
            timeout_s=self.timeout_s,
        )

    def _in_thread(self, request: BuildRequest, out_dir: str) -> KernelArtifact:
        return _compile_job(self.factory, request, self.compile_args, out_dir)

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
        except WorkerCrashed as exc:
            status, error = BuildStatus.CRASH, f"compiler {exc}"
        except RemoteJobError as exc:
            status, error = BuildStatus.ERROR, first_lines(exc.remote.message)
        except Exception as exc:  # noqa: BLE001 - thread mode: the compile's own exception
            status, error = BuildStatus.ERROR, first_lines(f"{exc}")
        wall = time.perf_counter() - start
        if error is not None:
            log.info("config %s failed to compile: %s", request.config, error.splitlines()[0])
        return BuildResult(
            index=request.index,
            config=request.config,
            status=status,
            artifact=artifact,
            error=error,
            compile_s=(artifact.compile_s + artifact.export_s) if artifact else wall,
            wall_s=wall,
        )
