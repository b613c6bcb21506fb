"""The run actor: the run worker in Ray, with a memory watcher beside it (``watch``).

:class:`RayWorker` stands in for :class:`tileauto.workers.procs.Worker` in a runner: a config
that segfaults kills the actor (a crash), one that hangs is killed past the timeout, one that
grows past its memory limit is killed by the watcher; the actor is then replaced.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import cloudpickle

from tileauto.artifact import KernelArtifact
from tileauto.cache.folders import private_fallback_dir
from tileauto.cache.scratch import claim_scratch_dir, remove_leftovers
from tileauto.errors import SettingsError, TileautoError, WorkerError
from tileauto.machine import run_memory_limit_bytes
from tileauto.options import ProfileArgs
from tileauto.scale.ray._files import (
    apply_settings,
    run_files,
    settings_env,
    shares_files,
    write_files,
)
from tileauto.scale.ray.cluster import (
    START_POLL_S,
    START_TIMEOUT_S,
    NodeLost,
    RayCluster,
    actor_class,
    import_ray,
    on_node,
)
from tileauto.scale.ray.node import local_hardware, use_path
from tileauto.scale.ray.nodes import not_loaded
from tileauto.scale.ray.watch import VERDICT_S, MemoryWatch, out_of_memory, verdict
from tileauto.utils.imports import collector_paused
from tileauto.workers import pickling
from tileauto.workers.phase import PHASE_KEY
from tileauto.workers.procs import RemoteError, RemoteJobError, WorkerCrashed, WorkerTimeout

# the driver's variables that change how a kernel runs: the run actor gets them too
_RUN_ENV = ("TVM_THREAD_POOL_SPIN_COUNT", "TVM_BIND_THREADS")


class Placement(Protocol):
    """What a :class:`RayWorker` asks of its runner: where to start, and what fits."""

    cluster: RayCluster
    profile: ProfileArgs
    timer: Any
    reserve_cores: bool

    def next_node(self) -> str:
        """The node for a new run actor."""
        ...

    def hardware_ok(self, node: str, hardware: dict[str, Any]) -> bool:
        """Whether a new actor's hardware is the target's."""
        ...

    def loads_on(self, node: str, why_not: str | None) -> bool:
        """Whether the tuning's functions loaded in a new actor (``why_not``: None)."""
        ...

    def lost(self, node: str) -> None:
        """``node`` died."""
        ...


class _RunActor:
    """The run worker as a Ray actor: :mod:`tileauto.run.worker`'s functions, called by
    :class:`RayWorker` with the driver's import path and settings, on built folders shipped
    as bytes."""

    def __init__(self) -> None:
        # the kernels it runs are written here: a folder of this user's own (a shared
        # /tmp/tileauto-ray, made by whoever came first, let another user swap them or refuse
        # this one's actors), claimed while the actor lives; those of killed actors go now
        parent = private_fallback_dir("ray")
        remove_leftovers(parent, only="run")
        self.claim = claim_scratch_dir(parent, "run")
        self.scratch = self.claim.path
        self.folders: dict[str, Path] = {}

    def ping(
        self, device: str, path: list[str], token: tuple[str, str] | None = None
    ) -> dict[str, Any]:
        """Where the actor runs; its size with the run worker's code imported (the memory limit
        counts from there, as a local run worker's) and the node's available memory (the
        default limit); whether it sees the driver's files (``token``: see
        :meth:`RayCluster.share_files`)."""
        import psutil
        import ray

        use_path(path)
        import tileauto.jit.runtime  # noqa: F401 - TVM's runtime, which loads the kernels
        import tileauto.run.worker  # noqa: F401 - torch: the first job would import it anyway

        hardware = local_hardware(device)
        return {
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "hardware": hardware,
            "rss": psutil.Process().memory_info().rss,
            "available": psutil.virtual_memory().available,
            "total": psutil.virtual_memory().total,
            "shares_files": shares_files(token),
            "scratch": str(self.scratch),
        }

    def preload(self, path: list[str], env: dict[str, str], payload: bytes) -> str | None:
        """Unpickle the tuning's own functions (timer, supply and reference programs), which
        imports their modules now, while the configs compile, instead of in the first job;
        why they could not be loaded on this node, if they could not."""
        import ray

        use_path(path)
        apply_settings(env)
        try:
            with collector_paused():
                cloudpickle.loads(payload)
        except BaseException as exc:  # noqa: BLE001 - the node's fault: the driver's to say
            return not_loaded(exc, ray.util.get_node_ip_address(), "the tuning's functions")
        return None

    def call(
        self,
        path: list[str],
        env: dict[str, str],
        payload: bytes,
        folders: dict[str, dict[str, bytes]],
    ) -> tuple[str, Any]:
        use_path(path)
        apply_settings(env)
        for key, files in folders.items():
            local = self.scratch / f"{len(self.folders):05d}"
            write_files(local, files)
            self.folders[key] = local
        try:
            fn, args = cloudpickle.loads(payload)
            # a folder not shipped is read where it is (the driver's files are visible here)
            args = _map_artifacts(
                args,
                lambda a: (
                    a.moved_to(self.folders[key])
                    if (key := str(a.directory)) in self.folders
                    else a
                ),
            )
            return ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - the job's error is data
            return ("error", RemoteError(type(exc).__name__, str(exc), traceback.format_exc()))


def _map_artifacts(value: Any, fn: Callable[[KernelArtifact], KernelArtifact]) -> Any:
    """``value`` with every artifact in it (alone, in a RunRequest, in a list) mapped."""
    from tileauto.run.session import RunRequest

    if isinstance(value, KernelArtifact):
        return fn(value)
    if isinstance(value, RunRequest):
        return dataclasses.replace(value, artifact=fn(value.artifact))
    if isinstance(value, (list, tuple)):
        mapped = [_map_artifacts(v, fn) for v in value]
        return mapped if isinstance(value, list) else tuple(mapped)
    return value


class RayWorker:
    """A run actor that stands in for :class:`tileauto.workers.procs.Worker` in a Runner.

    ``call`` runs a function in the actor and raises what a local worker raises
    (:class:`WorkerTimeout`, :class:`WorkerCrashed`, :class:`RemoteJobError`), plus
    :class:`NodeLost` when the actor's node died (not the config's fault).
    """

    def __init__(
        self, runner: Placement, device: str, threads: int, memory_limit_mb: int = -1
    ) -> None:
        self.runner = runner
        self.device = device
        self.threads = threads
        self.memory_limit_mb = memory_limit_mb  # -1: 90% of the node's memory available
        self.memory_limit_bytes = 0  # the current actor's limit (known once it started)
        self.name = f"ray-run-{device}"
        self.actor: Any = None
        self.watcher: Any = None  # the actor's memory watcher (see tileauto.scale.ray.watch)
        self._watch: Any = None  # its answer: the actor was killed for its memory, or died
        self.node: str | None = None
        self.pid: int | None = None
        self.pids: list[int] = []  # every actor process this worker started (tests look)
        self.watcher_pids: list[int] = []  # and every watcher's
        self._shipped: set[str] = set()
        self.shares_files = False  # the actor reads the driver's kernel folders in place
        self.scratch: str | None = None  # where the actor writes the kernels shipped to it
        self._busy = False
        self._lock = threading.RLock()  # one job at a time, as a local worker
        self._kills = 0  # kill() calls: a start in progress gives up when this moves
        self.starter: threading.Thread | None = None  # its start ahead of the first job
        self._phase_env: dict[str, str] = {}  # where the actor keeps its phase (job_phase)

    @property
    def alive(self) -> bool:
        """An actor is running (not killed for its memory, nor dead, as far as its watcher
        knows)."""
        if self.actor is None:
            return False
        if self._watch is not None and import_ray().wait([self._watch], timeout=0)[0]:
            self.kill()
            return False
        return True

    @property
    def busy(self) -> bool:
        return self._busy

    def start(self) -> RayWorker:
        """Start the actor on a matching node, with its memory watcher, if it is not running."""
        if self.actor is not None:
            return self
        ray = self.runner.cluster.connect()
        kills = self._kills
        while True:
            node = self.runner.next_node()
            env = {"TVM_NUM_THREADS": str(self.threads), "OMP_NUM_THREADS": str(self.threads)}
            env.update({k: os.environ[k] for k in _RUN_ENV if k in os.environ})
            actor = (
                actor_class(ray, _RunActor)
                .options(
                    num_cpus=0,
                    num_gpus=1 if self.device == "cuda" else 0,
                    scheduling_strategy=on_node(ray, node),
                    max_restarts=0,
                    max_task_retries=0,
                    runtime_env={"env_vars": env},
                )
                .remote()
            )
            # no CPU: a hold of the node's cores does not keep the watcher from starting
            watcher = (
                actor_class(ray, MemoryWatch)
                .options(
                    num_cpus=0,
                    scheduling_strategy=on_node(ray, node),
                    max_restarts=0,
                    max_task_retries=0,
                )
                .remote()
            )
            refs = [
                actor.ping.remote(self.device, list(sys.path), self.runner.cluster.token),
                watcher.ready.remote(),
            ]
            try:  # run by the actor after ping (its calls run in order), before any job
                preload = pickling.dumps((self.runner.profile, self.runner.timer))
                refs.append(actor.preload.remote(list(sys.path), settings_env(), preload))
            except Exception:  # noqa: BLE001 - not picklable: the first job says so
                pass
            try:
                info, (watcher_pid, phase_fd), *loaded = self._started(ray, refs, kills)
            except _StartStopped:
                ray.kill(actor, no_restart=True)
                ray.kill(watcher, no_restart=True)
                raise WorkerError(
                    "the run actor's start was stopped: the runner was closed"
                ) from None
            except ray.exceptions.RayError as exc:
                ray.kill(actor, no_restart=True)
                ray.kill(watcher, no_restart=True)
                self.runner.cluster.check_own_node(ask_gcs=True)
                if self.runner.cluster.node_alive(node):
                    raise TileautoError(f"the Ray run actor could not start: {exc}") from exc
                self.runner.lost(node)
                continue
            if not self.runner.hardware_ok(node, info["hardware"]) or not self.runner.loads_on(
                node, loaded[0] if loaded else None
            ):
                ray.kill(actor, no_restart=True)
                ray.kill(watcher, no_restart=True)
                continue
            try:
                limit = run_memory_limit_bytes(
                    self.memory_limit_mb, info["total"], f"the Ray node {node}"
                ) or int(info["available"] * 0.9)
            except SettingsError:
                ray.kill(actor, no_restart=True)
                ray.kill(watcher, no_restart=True)
                raise
            self._watch = watcher.watch.remote(info["pid"], info["rss"], limit)
            # the actor marks the user's programs it runs in its watcher's memory (job_phase)
            self._phase_env = (
                {} if phase_fd is None else {PHASE_KEY: f"/proc/{watcher_pid}/fd/{phase_fd}"}
            )
            self.actor, self.watcher, self.node, self.pid = actor, watcher, node, info["pid"]
            self.memory_limit_bytes = limit
            self.pids.append(info["pid"])
            self.watcher_pids.append(watcher_pid)
            self._shipped = set()
            self.shares_files = bool(info.get("shares_files"))
            self.scratch = info["scratch"]
            return self

    def _started(self, ray: Any, refs: list[Any], kills: int) -> list[Any]:
        """The answers of a new actor and its watcher; :class:`_StartStopped` as soon as
        :meth:`kill` is called meanwhile (a thread must not wait in Ray for minutes after
        its session ended: Ray may be shut down under it)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=START_POLL_S)
            if self._kills != kills:
                raise _StartStopped
            self.runner.cluster.check_own_node()
            if len(ready) == len(refs):
                return list(ray.get(refs))
            if time.monotonic() > deadline:
                raise ray.exceptions.GetTimeoutError(
                    f"the run actor did not answer within {START_TIMEOUT_S:g} s"
                )

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        with self._lock:
            return self._call(fn, args, timeout_s)

    def _call(self, fn: Callable[..., Any], args: tuple, timeout_s: float | None) -> Any:
        self.start()
        ray = self.runner.cluster.connect()
        if self.device == "cpu" and self.runner.reserve_cores and fn in _TIMING:
            assert self.node is not None
            try:
                self.runner.cluster.hold_cores(self.node)
            except NodeLost:
                self.kill()  # the watcher (the actor is gone with its node)
                self.runner.cluster.check_own_node(ask_gcs=True)
                self._lost()
                raise
        folders: dict[str, dict[str, bytes]] = {}

        def ship(artifact: KernelArtifact) -> KernelArtifact:
            key = str(artifact.directory)
            if not self.shares_files and key not in self._shipped:
                folders[key] = run_files(Path(artifact.directory))
            return artifact

        _map_artifacts(args, ship)
        payload = pickling.dumps((fn, args))
        watch, limit = self._watch, self.memory_limit_bytes
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._busy = True
        try:
            env = {**settings_env(), **self._phase_env}
            ref = self.actor.call.remote(list(sys.path), env, payload, folders)
            waiting = [ref, watch]
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                # in short waits: a job on a node that died is not a config that timed out
                wait = START_POLL_S if left is None else min(left, START_POLL_S)
                ready, _ = ray.wait(waiting, num_returns=1, timeout=wait)
                if not ready and self.runner.cluster.own_node_lost():
                    self.kill()
                    self.runner.cluster.check_own_node()
                if not ready and (deadline is None or time.monotonic() < deadline):
                    continue
                if not ready:
                    phase = self._phase_after_kill(ray, watch)
                    self.kill()
                    raise WorkerTimeout(
                        f"timed out after {timeout_s:g} s; worker {self.name} was killed",
                        phase=phase,
                    )
                if ref in ready:
                    break
                growth, phase = verdict(ray, watch, 0)
                if growth is not None:
                    self.kill()
                    raise out_of_memory(limit, phase)
                waiting = [ref]  # the actor died otherwise (its job says how), or the watcher
            try:
                status, value = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                node = self.node
                if self.runner.cluster.own_node_lost(ask_gcs=True):
                    self.kill()
                    self.runner.cluster.check_own_node(ask_gcs=True)
                if not self.runner.cluster.node_alive(node):
                    self.kill()  # the watcher (the actor is gone with its node)
                    self._lost()
                    raise NodeLost(f"node {str(node)[:12]} was lost during {fn.__name__}") from exc
                growth, phase = verdict(ray, watch, VERDICT_S)
                self.kill()
                if growth is not None:
                    raise out_of_memory(limit, phase) from None
                oom = "memory" in str(exc).lower() and "OutOfMemory" in type(exc).__name__
                raise WorkerCrashed(
                    f"crashed: the Ray run actor died ({_actor_reason(exc)})",
                    out_of_memory=oom,
                    phase=phase,
                ) from None
        finally:
            self._busy = False
        self._shipped.update(folders)
        if ray.wait([watch], timeout=0)[0]:
            # the watcher answered after the job: the actor is gone; a new one runs the next job
            self.kill()
        if status == "ok":
            return value
        raise RemoteJobError(value)

    def _phase_after_kill(self, ray: Any, watch: Any) -> str | None:
        """Kill the actor alone (a job past its time) and read from its watcher, which sees it
        go, the program of the user's it was in (None: none, or no answer in time)."""
        if self.actor is not None and self._phase_env:
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - its node may be gone
                return None
            return verdict(ray, watch, VERDICT_S)[1]
        return None

    def _lost(self) -> None:
        node = self.node
        self.actor, self.node = None, None
        if node is not None:
            self.runner.lost(node)

    def kill(self) -> None:
        """Kill the actor (its process and what it runs) and its watcher now; a start in
        progress kills the ones it started and gives up."""
        self._kills += 1
        actors = [a for a in (self.actor, self.watcher) if a is not None]
        self.actor, self.watcher, self._watch = None, None, None
        for actor in actors:
            ray = import_ray()
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - its node may be gone
                pass

    close = kill


class _StartStopped(Exception):
    """A run actor's start gave up: its worker was killed meanwhile."""


def start_quietly(worker: RayWorker) -> None:
    """Start a run actor ahead of its first job; a failure is met again by that job."""
    with worker._lock:
        try:
            worker.start()
        except Exception:  # noqa: BLE001 - the first job starts it again and raises
            pass


def _actor_reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if "exit detail:" in text:
        text = text.split("exit detail:", 1)[1]
    return text.split(" Some common causes", 1)[0][:200].strip()


def _timing_functions() -> tuple[Any, ...]:
    from tileauto.run import worker as run_worker

    return (run_worker.check_and_time, run_worker.retime, run_worker.time_reference)


class _Timing:
    def __contains__(self, fn: Any) -> bool:
        return fn in _timing_functions()


_TIMING = _Timing()
