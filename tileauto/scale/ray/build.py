"""Compiles as Ray tasks: :class:`RayBuilder`, the build stage of ``executor="ray"``."""

from __future__ import annotations

import enum
import numbers
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.build.driver import WAKE_S, SlotStage
from tileauto.build.job import compile_job, error_text, failed, first_lines, memory_error
from tileauto.errors import TileautoError
from tileauto.options import CompileArgs
from tileauto.records import BuildRequest, BuildResult, BuildStatus
from tileauto.scale.ray._files import (
    apply_settings,
    folder_files,
    settings_env,
    shares_files,
    write_files,
)
from tileauto.scale.ray.cluster import RayCluster, import_ray, on_node
from tileauto.scale.ray.node import probe, use_path
from tileauto.scale.ray.nodes import NoMatchingNodeError, not_loaded
from tileauto.settings import Settings
from tileauto.utils.imports import collector_paused
from tileauto.workers import pickling
from tileauto.workers.tempdirs import job_temp_dir

log = get_logger("ray")

# tasks of one runtime environment share worker processes: warm-ups, compiles and holds
_COMPILE_ENV = {"env_vars": {"TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}}
# (Ray job, node) whose compile workers a build of this process warmed up (Ray keeps them
# idle: see LOCAL_SYSTEM_CONFIG); a later build skips their warm-ups
_WARMED: set[tuple[str, str]] = set()
_WARMED_LOCK = threading.Lock()
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the terminal colours of Ray's task errors
# a compile task's start-up on its node (a fresh Ray worker imports torch, TVM and the
# factory's modules: seconds, not the config's compile): bounded apart from the compile's
# timeout, by the larger of the two (docs/scale.md, "Waits that end")
LOAD_TIMEOUT_S = 120.0
# no compile of a build started nor ran for this long while one waits for its CPUs: warn
# once what it waits for; after PENDING_LIMIT_S, the build fails (docs/scale.md, "Waits that end")
PENDING_WARN_S = 60.0
PENDING_LIMIT_S = 900.0
_LOADED = "loaded"  # what a compile task yields once the factory is loaded on its node


def _warm_task(setup: bytes, probed: Any = None) -> dict[str, Any]:
    """On a node, in a worker the compiles then reuse: import what a compile needs (TVM's
    compiler, the factory's modules); which worker, and whether TVM is in it now. ``probed``
    is unused: taking it makes the warm-up wait for the probe, whose idle worker then runs it
    (so Ray starts no worker that runs nothing)."""
    import ray

    from tileauto.jit.compiler import load_compiler

    started = time.monotonic()
    path, env, payload = cloudpickle.loads(setup)
    use_path(path)
    apply_settings(env)
    try:
        with collector_paused():
            cloudpickle.loads(payload)  # the factory's modules (torch, the user's)
            load_compiler()
    except BaseException:  # noqa: BLE001 - the first compile reports it properly
        pass
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
        "tvm": "tvm" in sys.modules,
        "import_s": time.monotonic() - started,
    }


def _compile_task(
    setup: bytes, request: BuildRequest, here: tuple[str, tuple[str, str] | None]
) -> Any:
    """On a node (a streaming Ray task): say where it started, then compile one config.

    Yields the node id first, then ``"loaded"`` once the factory and TVM's compiler are
    loaded (a fresh worker imports them: :data:`LOAD_TIMEOUT_S` bounds that; the compile's
    timeout counts from then), then ``("ok", artifact JSON, files)``, ``("here", artifact JSON)`` when the node shares the
    driver's files (``here``: the driver's folder for this config and the token of
    :meth:`RayCluster.share_files`; the kernel is compiled into it),
    ``("error", type name, message)``, or ``("unloadable", message)`` when the factory does
    not load on this node (a module the node lacks: no config compiles there).
    """
    import ray

    yield ray.get_runtime_context().get_node_id()
    try:
        path, env, payload = cloudpickle.loads(setup)
        use_path(path)
        apply_settings(env)
        factory, compile_args = cloudpickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001 - the node's fault, not the config's
        yield ("unloadable", not_loaded(exc, ray.util.get_node_ip_address()))
        return
    try:
        from tileauto.jit.compiler import load_compiler

        with collector_paused():
            load_compiler()
    except BaseException:  # noqa: BLE001 - the compile itself reports it properly
        pass
    yield _LOADED
    folder, token = here
    # the task's own temp folder (the kernel's too, when it travels back as bytes): what a
    # compile killed on its timeout leaves there goes with it (workers.tempdirs)
    with job_temp_dir():
        if shares_files(token):
            try:
                artifact = compile_job(factory, request, compile_args, folder)
            except BaseException as exc:  # noqa: BLE001 - a failed compile is data
                yield ("error", type(exc).__name__, str(exc))
                return
            yield ("here", artifact.to_json())
            return
        with tempfile.TemporaryDirectory(prefix="tileauto-ray-build-") as tmp:
            out = Path(tmp) / "kernel"
            try:
                artifact = compile_job(factory, request, compile_args, str(out))
            except BaseException as exc:  # noqa: BLE001 - a failed compile is data
                yield ("error", type(exc).__name__, str(exc))
                return
            yield ("ok", artifact.to_json(), folder_files(out))


class _Event(enum.Enum):
    """What a compile task said, short of a result."""

    STARTED = "started"  # on a node: loading the factory (LOAD_TIMEOUT_S counts from now)
    LOADED = "loaded"  # the factory is loaded: the compile's timeout counts from now
    LOST = "lost"  # its node died: submitted again, elsewhere


@dataclass
class _Job:
    """One request's compile task, submitted again when its node is lost."""

    index: int
    ref: Any = None  # the task's ObjectRefGenerator
    node: str | None = None
    started: float | None = None
    loaded: float | None = None  # when the factory was loaded on its node (the compile began)
    submitted: float = 0.0
    attempts: int = 0
    dead_before: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Unfit:
    """A compile task's node could not load the factory (see :func:`not_loaded`)."""

    node: str | None
    reason: str


class RayBuilder(SlotStage):
    """Compiles configs as Ray tasks (a :class:`~tileauto.tune.stages.BuildStage`).

    Args:
        factory: the kernel factory (sent by cloudpickle, once per build, via the object store).
        compile_args: target, out_idx and pass options.
        staging_dir: the driver's folder for built kernels (one ``build-<id>`` per build).
        timeout_s: per-config compile limit, from the moment the factory is loaded on the
            task's node (loading it in a fresh Ray worker has its own bound,
            ``max(timeout_s, LOAD_TIMEOUT_S)``).
        cluster: the cluster (default: ``RayCluster()``, this process's Ray or a local one).
        num_cpus: CPUs each compile task reserves (a positive number: it also says how
            many compiles a node runs at once).
        settings: the tuning's settings (default: read from the environment now): the
            compile worker variables apply to the cluster's compile slots as they do to this
            machine's CPUs (``TILEAUTO_AUTO_TUNING_CPU_COUNTS`` at most the slots,
            ``..._CPU_UTILITIES`` of them, at most ``..._MAX_CPU_COUNT``).

    Raises:
        ValueError: ``num_cpus`` is not a positive number.

    Attributes:
        submitted: compile tasks submitted (resubmissions after a node loss included).
        resubmitted: compile tasks submitted again because their node was lost.
        unfit: node -> why the factory could not be loaded there (a module the node lacks).
            Its compiles go to the other nodes, never counted as the configs' failures;
            with no node left, the build raises :class:`NoMatchingNodeError`.
    """

    def __init__(
        self,
        factory: Callable[..., Any],
        compile_args: CompileArgs,
        *,
        staging_dir: Path,
        timeout_s: float = 300.0,
        cluster: RayCluster | None = None,
        num_cpus: float = 1,
        settings: Settings | None = None,
    ) -> None:
        self.factory = factory
        self.settings = settings if settings is not None else Settings.from_env()
        self.compile_args = compile_args
        self.staging_dir = Path(staging_dir)
        self.timeout_s = timeout_s
        self.cluster = cluster if cluster is not None else RayCluster()
        self.num_cpus = _positive_cpus(num_cpus)
        self.submitted = 0
        self.resubmitted = 0
        self.unfit: dict[str, str] = {}
        self._turn = 0  # compiles sent to a fit node so far: whose turn is next (_fit_node)
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._inflight: set[Any] = set()
        self._workers: int | None = None
        self._waiting: set[threading.Condition] = set()  # builds to wake up on a cancel
        self._warming: dict[Any, tuple[str, str]] = {}  # start()'s warm-ups: (job, node)
        # compile tasks on a node now, and when one last started or ended (see _TaskSlot._stalled)
        self._running = 0
        self._progress = time.monotonic()
        self._pending_warned = False
        # called (on the build's thread) as a compile starts on a node: (request index, node)
        self.on_start: Callable[[int, str | None], None] | None = None

    @property
    def workers(self) -> int:
        """How many configs compile at once: the cluster's compile slots (its CPUs over
        ``num_cpus``, read once), as the compile worker settings allow.

        Raises:
            SettingsError: ``TILEAUTO_AUTO_TUNING_CPU_COUNTS`` is more than those slots.
        """
        if self._workers is None:
            slots = max(1, int(self.cluster.cpus() // self.num_cpus))
            where = (
                f"compile slots of the Ray cluster ({self.num_cpus:g} CPU each)"
                if self.num_cpus != 1
                else "CPUs of the Ray cluster"
            )
            self._workers = self.settings.compile_workers(slots, where)
        return self._workers

    def start(self) -> None:
        """Join the cluster, probe each node's hardware and warm up a worker per compile slot,
        without waiting for any of it.

        A warm-up holds a compile's CPUs while it imports TVM's compiler, so the compiles,
        which wait for those CPUs, run in warm workers. The probes (what
        :func:`matching_nodes` asks) take no CPU and import neither torch nor TVM, so they
        answer even on a node whose CPUs are busy (docs/scale.md, "What runs where").
        """
        ray = self.cluster.connect()
        self.cluster.share_files(self.staging_dir)  # before the run actors look for its token
        setup = pickling.dumps((list(sys.path), settings_env(), self._payload()))
        probe_task, warm_task = ray.remote(probe), ray.remote(_warm_task)
        job = ray.get_runtime_context().get_job_id()
        probes: dict[str, Any] = {}
        warming: dict[Any, tuple[str, str]] = {}
        left = self.workers  # no more warm workers than compiles run at once
        for node, resources in self.cluster.nodes().items():
            slots = int(resources.get("CPU", 0.0) // self.num_cpus)
            if slots <= 0:
                continue
            pinned = on_node(ray, node)
            probes[node] = probe_task.options(
                num_cpus=0, max_retries=0, scheduling_strategy=pinned, runtime_env=_COMPILE_ENV
            ).remote("cpu", list(sys.path))
            with _WARMED_LOCK:
                if (job, node) in _WARMED:
                    continue  # an earlier build of this process warmed its workers (kept idle)
            for _ in range(min(slots, left)):
                left -= 1
                ref = warm_task.options(
                    num_cpus=self.num_cpus,
                    max_retries=0,
                    scheduling_strategy=pinned,
                    runtime_env=_COMPILE_ENV,
                ).remote(setup, probes[node])
                warming[ref] = (job, node)
        with self._lock:
            self._warming = warming
        self.cluster.add_probes(probes)

    def _payload(self) -> bytes:
        return pickling.dumps((self.factory, self.compile_args))

    def cancel(self) -> None:
        """Cancel this builder's compiles in flight (their workers are killed). Any thread."""
        self._cancelled.set()
        with self._lock:
            refs = list(self._inflight)
        ray = import_ray()
        for ref in refs:
            _cancel(ray, ref)
        self._wake_builds()
        self._stop_warming(ray)

    def close(self) -> None:
        with self._lock:
            leftover = bool(self._inflight)
        if leftover:
            self.cancel()
        else:
            self._stop_warming(import_ray())

    def _stop_warming(self, ray: Any) -> None:
        """Cancel the warm-ups still queued or running; remember the nodes whose warm-ups
        all ended with TVM imported (a later build of this process skips them)."""
        with self._lock:
            warming, self._warming = self._warming, {}
        if not warming:
            return
        try:
            done, pending = ray.wait(list(warming), num_returns=len(warming), timeout=0)
        except Exception:  # noqa: BLE001 - Ray is gone: nothing left to cancel
            return
        for ref in pending:
            _cancel(ray, ref)
        cold = {warming[ref] for ref in pending}
        for ref in done:
            try:
                warm = bool(ray.get(ref)["tvm"])
            except Exception:  # noqa: BLE001 - its worker or node died: not warm
                warm = False
            if not warm:
                cold.add(warming[ref])
        with _WARMED_LOCK:
            _WARMED.update(set(warming.values()) - cold)

    def build(
        self,
        requests: Sequence[BuildRequest],
        on_result: Callable[[BuildResult], None] | None = None,
    ) -> None:
        """Compile every request; ``on_result`` gets each result as it ends.

        The local builder's loop (:func:`tileauto.build.driver.drive`), with a slot per
        compile the cluster runs at once: each slot has one Ray task in flight, submitted
        again when its node is lost (:class:`_TaskSlot`).
        """
        if not requests:
            return
        ray = self.cluster.connect()
        self.cluster.release_cores()  # a timing run of this session is over: compile there
        token = self.cluster.share_files(self.staging_dir)
        # with each task, not ray.put: a driver holding an object on its own node dies with it
        setup = pickling.dumps((list(sys.path), settings_env(), self._payload()))
        dead = frozenset(self._dead_nodes())  # once per build, not per job: a query of the GCS
        slots = [
            _TaskSlot(self, ray, setup, token, dead)
            for _ in range(min(self.workers, len(requests)))
        ]
        self._drive(requests, slots, on_result, name="tileauto-ray-build")

    def _fit_node(self, unfit: _Unfit) -> str:
        """Take note that ``unfit.node`` does not load the factory; the next node for its
        compiles, in turn among those that may (NoMatchingNodeError when none is left)."""
        if unfit.node is not None and unfit.node not in self.unfit:
            self.unfit[unfit.node] = unfit.reason
            log.warning("Ray node %s left out of the compiles: %s", unfit.node[:12], unfit.reason)
        fit = sorted(
            n
            for n, r in self.cluster.nodes().items()
            if r.get("CPU", 0.0) >= self.num_cpus and n not in self.unfit
        )
        if not fit:
            raise NoMatchingNodeError(
                f"no node of the Ray cluster could load the factory, so nothing compiled: "
                f"{unfit.reason}"
            )
        self._turn += 1
        return fit[self._turn % len(fit)]

    def _dead_nodes(self) -> set[str]:
        ray = import_ray()
        return {n["NodeID"] for n in ray.nodes() if not n["Alive"]}

    def _answer(
        self, ray: Any, job: _Job, request: BuildRequest, out: Path
    ) -> _Event | _Unfit | BuildResult:
        """The next thing a compile task says (its kernel folder: ``out``)."""
        exc_types = ray.exceptions
        try:
            value = ray.get(next(job.ref))
        except StopIteration:
            value = None
            error: BaseException | None = RuntimeError("the compile task returned nothing")
        except exc_types.TaskCancelledError:
            return failed(request, BuildStatus.CANCELLED, "cancelled")
        except (exc_types.NodeDiedError, exc_types.ObjectLostError) as exc:
            error = exc
            if job.attempts <= self.cluster.node_retries:
                log.info("compile of %s lost with its node; submitted again", request.config)
                return _Event.LOST
        except exc_types.WorkerCrashedError as exc:
            error = exc
            lost = (
                not self.cluster.node_alive(job.node)
                if job.node is not None
                else bool(self._dead_nodes() - job.dead_before)
            )
            if lost and job.attempts <= self.cluster.node_retries:
                log.info("compile of %s lost with its node; submitted again", request.config)
                return _Event.LOST
            if not lost:
                return failed(
                    request,
                    BuildStatus.CRASH,
                    f"compiler crashed: its Ray worker died ({first_lines(str(exc), 1)})",
                    _since(job),
                )
        except exc_types.OutOfMemoryError as exc:
            return failed(request, BuildStatus.OUT_OF_MEMORY, f"compiler {exc}", _since(job))
        except exc_types.RayTaskError as exc:  # the task raised: an error, its worker lives
            message = first_lines(_ray_error_text(exc))
            return failed(request, BuildStatus.ERROR, message, _since(job))
        except exc_types.RayError as exc:
            error = exc
        else:
            error = None
        if error is not None:
            return failed(
                request,
                BuildStatus.CRASH,
                f"compile failed in Ray: {first_lines(_ray_error_text(error), 2)}",
                _since(job),
            )
        if job.started is None:
            job.node, job.started = value, time.monotonic()
            return _Event.STARTED
        if value == _LOADED:
            job.loaded = time.monotonic()
            return _Event.LOADED
        wall = _since(job)
        if value[0] == "unloadable":
            return _Unfit(job.node, value[1])
        if value[0] == "error":
            _, type_name, message = value
            oom = memory_error(type_name, message)
            status = BuildStatus.OUT_OF_MEMORY if oom else BuildStatus.ERROR
            reason = error_text(type_name, message)
            log.info("config %s failed to compile: %s", request.config, reason.splitlines()[0])
            return failed(request, status, reason, wall)
        if value[0] == "here":
            artifact = KernelArtifact.from_json(value[1], directory=out)
        else:
            _, data, files = value
            out.mkdir(parents=True, exist_ok=True)
            write_files(out, files)
            artifact = KernelArtifact.from_json(data, directory=out)
            # the folder's own record names the folder it is in, as after a local build
            import json

            (out / KernelArtifact.META).write_text(
                json.dumps(artifact.to_json(), indent=1, default=str)
            )
        return BuildResult(
            index=request.index,
            config=request.config,
            status=BuildStatus.OK,
            artifact=artifact,
            compile_s=artifact.compile_s + artifact.export_s,
        )


def _ray_error_text(exc: BaseException) -> str:
    """``Type: message`` of what a Ray error says: the cause a task raised (a RayTaskError's
    own text is the task's name and traceback), without the terminal's colours."""
    cause = getattr(exc, "cause", None)
    cause = cause if isinstance(cause, BaseException) else exc
    return _ANSI.sub("", f"{type(cause).__name__}: {cause}")


def _positive_cpus(num_cpus: Any) -> float:
    """``num_cpus`` as a float, or a ValueError: 0 or less would make the compile slots
    endless (the cluster's CPUs divided by it) and start() submit that many warm-ups."""
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, numbers.Real):
        raise ValueError(
            f"RayBuilder(num_cpus=...) must be a positive number of CPUs per compile task, "
            f"got {num_cpus!r} ({type(num_cpus).__name__})"
        )
    value = float(num_cpus)
    if not 0 < value < float("inf"):
        raise ValueError(
            f"RayBuilder(num_cpus=...) must be a positive, finite number of CPUs per compile "
            f"task (each compile reserves that many), got {num_cpus!r}"
        )
    return value


def _since(job: _Job) -> float:
    """Seconds the config has compiled (from the factory's load, else the task's start)."""
    begun = job.loaded if job.loaded is not None else job.started
    return time.monotonic() - (begun if begun is not None else job.submitted)


def _cancel(ray: Any, ref: Any) -> None:
    try:
        ray.cancel(ref, force=True)
    except Exception:  # noqa: BLE001 - already finished, or its node is gone
        pass


class _TaskSlot:
    """A compile slot of a Ray build: one task at a time, submitted again where its node was
    lost (at most ``node_retries`` times) or where its node cannot load the factory."""

    def __init__(
        self,
        builder: RayBuilder,
        ray: Any,
        setup: bytes,
        token: tuple[str, str] | None,
        dead: frozenset[str],
    ) -> None:
        self.builder, self.ray, self.setup, self.token, self.dead = builder, ray, setup, token, dead
        self.options = {
            "num_cpus": builder.num_cpus,
            "max_retries": 0,
            "retry_exceptions": False,
            "num_returns": "streaming",
            "runtime_env": _COMPILE_ENV,
        }
        self.task = ray.remote(_compile_task)

    def compile(self, request: BuildRequest, out_dir: str) -> BuildResult:
        b, job = self.builder, _Job(request.index)
        dead, node = self.dead, None
        while True:
            self._submit(job, request, out_dir, dead, node)
            try:
                answer = self._wait(job, request, Path(out_dir))
            finally:
                with b._lock:
                    b._inflight.discard(job.ref)
                    if job.started is not None:
                        b._running -= 1
                        b._progress = time.monotonic()
            if isinstance(answer, BuildResult):
                return answer
            if isinstance(answer, _Unfit):
                node = b._fit_node(answer)  # not an attempt: the node's fault, not the config's
                continue
            b.cluster.check_own_node(ask_gcs=True)
            with b._lock:
                b.resubmitted += 1
            dead, node = frozenset(b._dead_nodes()), None

    def release(self) -> None:
        pass

    def _submit(
        self, job: _Job, request: BuildRequest, out_dir: str, dead: frozenset[str], node: str | None
    ) -> None:
        """``node``: there (unless it is gone); the nodes in ``dead`` were dead before."""
        job.attempts += node is None
        job.node, job.started, job.loaded = None, None, None
        job.submitted = time.monotonic()
        job.dead_before = dead
        options = dict(self.options)
        if node is not None:
            options["scheduling_strategy"] = on_node(self.ray, node, soft=True)
        job.ref = self.task.options(**options).remote(self.setup, request, (out_dir, self.token))
        with self.builder._lock:
            self.builder._inflight.add(job.ref)
            self.builder.submitted += 1

    def _wait(self, job: _Job, request: BuildRequest, out: Path) -> _Event | _Unfit | BuildResult:
        """Until the task answers (its start and load: on to its result), times out or is
        cancelled."""
        b, ray = self.builder, self.ray
        while True:
            if b._cancelled.is_set():
                _cancel(ray, job.ref)
                return failed(request, BuildStatus.CANCELLED, "cancelled")
            b.cluster.check_own_node()
            if job.started is None:
                self._stalled(job)
            deadline = self._deadline(job)
            wait = WAKE_S if deadline is None else min(WAKE_S, max(0.0, deadline - _now()))
            if ray.wait([job.ref], num_returns=1, timeout=wait)[0]:
                answer = b._answer(ray, job, request, out)
                if answer is _Event.STARTED:
                    with b._lock:
                        b._running += 1
                        b._progress = time.monotonic()
                    if b.on_start is not None:
                        b.on_start(request.index, job.node)
                    continue
                if answer is _Event.LOADED:
                    continue
                return answer
            if deadline is not None and _now() > deadline:
                _cancel(ray, job.ref)
                return self._timed_out(job, request)

    def _deadline(self, job: _Job) -> float | None:
        """When the task's load (from its start) or its compile (from the load) is over time."""
        b = self.builder
        if job.loaded is not None:
            return job.loaded + b.timeout_s
        if job.started is not None:
            return job.started + max(b.timeout_s, LOAD_TIMEOUT_S)
        return None

    def _timed_out(self, job: _Job, request: BuildRequest) -> BuildResult:
        b = self.builder
        if job.loaded is not None:
            reason = f"compile timed out after {b.timeout_s:g} s; its Ray worker was killed"
        else:
            load_s = max(b.timeout_s, LOAD_TIMEOUT_S)
            reason = (
                f"compile timed out: its Ray worker on node {str(job.node)[:12]} did not load "
                f"the factory (its modules, TVM's compiler) within {load_s:g} s of starting, "
                "before any compiling; the worker was killed"
            )
        return failed(request, BuildStatus.TIMEOUT, reason, _since(job))

    def _stalled(self, job: _Job) -> None:
        """A task still waits for its CPUs: warn once after PENDING_WARN_S, and raise after
        PENDING_LIMIT_S, while no compile of the build runs nor started meanwhile (a
        cluster whose CPUs other work holds: before, this waited forever, silently)."""
        b = self.builder
        with b._lock:
            if b._running:
                return
            idle = _now() - max(b._progress, job.submitted)
            warn = idle > PENDING_WARN_S and not b._pending_warned
            if warn:
                b._pending_warned = True
            pending = len(b._inflight)
        if not warn and idle <= PENDING_LIMIT_S:
            return
        what = self._busy_cpus(pending, idle)
        if idle > PENDING_LIMIT_S:
            raise ClusterBusyError(f"{what}; gave up after {PENDING_LIMIT_S:g} s")
        warnings.warn(
            f"{what}; still waiting (an error after {PENDING_LIMIT_S:g} s)",
            RuntimeWarning,
            stacklevel=2,
        )
        log.warning("%s", what)

    def _busy_cpus(self, pending: int, idle: float) -> str:
        """What the compile tasks wait for, with the cluster's CPUs now."""
        b = self.builder
        try:
            total = self.ray.cluster_resources().get("CPU", 0.0)
            free = self.ray.available_resources().get("CPU", 0.0)
            cpus = f"the cluster has {total:g} CPUs, {free:g} of them free"
        except Exception:  # noqa: BLE001 - Ray would not say: the message goes without it
            cpus = "the cluster's CPUs are not known"
        return (
            f"Ray compiles waiting for CPUs: {pending} compile task(s) pending for "
            f"{idle:.0f} s, none started, each needs {b.num_cpus:g} CPU (resource 'CPU'); "
            f"{cpus}. Other work (another tenant's tasks or actors) holds them"
        )


class ClusterBusyError(TileautoError):
    """No compile task of a Ray build got a CPU for ``PENDING_LIMIT_S``: other work holds the
    cluster's CPUs."""


def _now() -> float:
    return time.monotonic()
