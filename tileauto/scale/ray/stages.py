"""Builds and runs on a Ray cluster: the build and run stages of ``executor="ray"``.

:class:`RayBuilder` (a :class:`~tileauto.tune.stages.BuildStage`) compiles each config as a Ray
task; :class:`RayRunner` (a :class:`~tileauto.tune.stages.RunStage`) checks and times configs in a
Ray actor. A :class:`~tileauto.tune.session.TuningSession` drives them exactly as it drives the
local stages::

    cluster = RayCluster("auto")                  # or an address; None starts a local Ray
    session = TuningSession(
        problem,
        builder=RayBuilder(problem.factory, problem.compile_args, cluster=cluster,
                           staging_dir=..., timeout_s=problem.settings.compile_timeout_s),
        runner=RayRunner(problem.profile_args, cluster=cluster,
                         threads=problem.settings.run_threads(), device=problem.device_type,
                         captured=problem.captured_inputs, timer=problem.timer),
    )

What runs where:

* **Warm-up.** :meth:`RayBuilder.start` sends one warm-up task per compile slot, with a
  compile's CPUs (each imports TVM's compiler, torch and the factory's modules in a Ray
  worker, the process the compiles then reuse: a Ray worker is a fresh interpreter, not a
  fork of the driver), and first, one hardware probe per node, pinned there with no CPU.
  Compiles, warm-ups and probes share one runtime environment, so they share those worker
  processes.
* **Compiles** are Ray tasks (``num_cpus=1``, ``max_retries=0``) on any node: the factory and
  the compile options travel once per build through the object store (cloudpickle bytes, with
  the driver's ``sys.path`` and ``TILEAUTO_*`` settings, as a local compile worker gets them).
  A node that sees the driver's files (it reads back a token file the driver wrote in its
  staging folder: the same machine, or a shared file system) compiles straight into the
  driver's staging folder; another compiles into a temporary folder and returns its files as
  bytes, which the driver writes there. Either way a Ray build leaves exactly what a local
  build leaves. The task reports when it starts, so the compile timeout counts from there
  (not from the queue); past it the task is cancelled with ``force=True`` (its worker process
  is killed): ``compile_timeout``. A task whose worker dies is ``compile_crash``; one lost with
  its node (``NodeDiedError``, its result's object lost, or its worker gone with a node that
  is dead) is submitted again elsewhere, at most ``node_retries`` times.
* **Runs** happen in run actors, one per slot: each node whose hardware matches the driver's
  target (CPU: the model and flags and the cache key's device fingerprint) is a slot, and on
  GPU targets each GPU of a matching node (``num_gpus=1``). The default config runs first, in
  the first slot's actor (it makes the reference outputs); the configs after it run on every
  slot at once (:meth:`RayRunner.run_many`), each actor set up with the same inputs and that
  reference, and are recorded in the space's order (on a GPU target the session runs configs
  as their compiles end, so several GPUs time at once only when several configs wait).
  Re-timing the best few runs in the first slot only, so that the configs compared there
  share one machine. The actor runs :mod:`tileauto.run.worker`'s functions, the code of the
  local run worker: a config that segfaults kills the actor (``crash``), one that hangs is
  killed past the tuning's timeout (``timeout``); the actor is replaced and set up again, as
  :class:`tileauto.run.runner.Runner` does (``RayRunner`` *is* a ``Runner`` whose worker is
  :class:`RayWorker`). A config that takes more memory than ``TILEAUTO_RUN_MEMORY_LIMIT_MB``
  (counted from the actor's size once it has imported the run worker's code; by default 90%
  of the node's memory available when the actor starts) is killed by a watcher actor beside
  the run actor (same node, no CPU; it polls the actor's resident set every 50 ms) and
  recorded as ``out_of_memory``; the actor is replaced. An actor that sees the driver's files
  reads the kernels in place; elsewhere a kernel's library and record (not its sources) are
  shipped as bytes, once per actor. On a CPU target, while it times, the runner holds every
  core of the actor's node (a placement group pinned to the node: a reservation without a
  process), so no compile of any session shares the cores with a timing run; the next build
  releases them.

Ray is an optional dependency: nothing here imports it at module level, and
:func:`import_ray` says which extra to install.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import cloudpickle

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.build.builder import BuildRequest, BuildResult, BuildStatus, _compile_job, first_lines
from tileauto.errors import TileautoError, WorkerError
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import RunOutcome
from tileauto.run.runner import Runner
from tileauto.scale.ray.node import local_hardware, probe, use_path
from tileauto.utils.imports import collector_paused
from tileauto.utils.threads import background_thread
from tileauto.workers import pickling
from tileauto.workers.procs import (
    RemoteError,
    RemoteJobError,
    WorkerCrashed,
    WorkerTimeout,
)

log = get_logger("ray")
T = TypeVar("T")

RAY_EXTRA = "pip install 'tileauto[ray]'"
_WAKE_S = 0.1  # a build looks at its deadlines and cancel this often, at least
# how long a cluster's address may take to accept a connection before tileauto gives up (Ray
# itself retries for minutes when nothing answers there)
_CONNECT_TIMEOUT_S = 10.0
_START_TIMEOUT_S = 300.0  # an actor or probe start (a fresh process imports torch and TVM)
# how often a run actor's start looks whether its runner was closed meanwhile
_START_POLL_S = 0.2
# compile workers' environment: tasks of one runtime environment share (reuse) worker
# processes, so warm-ups, compiles and core holds all run in the same warm workers
_COMPILE_ENV = {"env_vars": {"TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}}
# (Ray job, node) whose compile workers a build of this process warmed up: Ray keeps idle
# workers (for LOCAL_SYSTEM_CONFIG's 10 minutes on a cluster tileauto starts), so a later
# build skips their warm-ups, which would hold CPUs while a fresh worker started for them
_WARMED: set[tuple[str, str]] = set()
_WARMED_LOCK = threading.Lock()
# Ray's settings for a cluster tileauto starts itself. Ray ends a worker process idle for
# 1 s (beyond one per CPU): the compile workers, idle while the configs are timed, were gone
# by the next tuning of the same process, which paid their start and TVM/torch imports again
# (bench/ray_scale.py: a second tuning 20.1 s against 15.9 s with them kept).
LOCAL_SYSTEM_CONFIG = {"idle_worker_killing_time_threshold_ms": 600_000}
# the driver's variables that change how a kernel runs: the run actor gets them too
_RUN_ENV = ("TVM_THREAD_POOL_SPIN_COUNT", "TVM_BIND_THREADS")
# the terminal colours of Ray's task errors
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# files of a kernel folder a run does not need
_READ_ONLY_FILES = ("_source.txt", "kernel_script.py")


class NoMatchingNodeError(TileautoError):
    """No node of the cluster has the hardware of the tuning's target."""


class NodeLost(WorkerError):
    """The node running a job died: the job is not the config's fault (it is run again)."""


class RayNodeLostError(TileautoError):
    """The Ray node of this process died (its raylet, or an agent it fate-shares with)."""


def import_ray() -> Any:
    """The ``ray`` module, or a clear error naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise TileautoError(
            f"executor='ray' needs Ray, which is not installed: {RAY_EXTRA}"
        ) from exc
    return ray


# -- the cluster ------------------------------------------------------------------------------
class RayCluster:
    """The connection to a Ray cluster and what a builder and a runner of one session share.

    Args:
        address: ``None`` (join the Ray this process already joined, or else start a local
            one, even where ``ray start`` runs a cluster on this machine; ``RAY_ADDRESS``,
            when set, is joined instead), ``"auto"`` (join the cluster running on this
            machine) or a cluster's address.
        node_retries: how many times a job lost with its node is run again elsewhere.
        share_files: let nodes that see the driver's files (the same machine, or a shared
            file system: see :meth:`share_files`) read and write kernel folders in place;
            False sends every folder as bytes.
        init_kwargs: more arguments for ``ray.init``.
        source: where ``address`` came from, for errors (``"TILEAUTO_RAY_ADDRESS"`` when a
            tuning reads it from there).

    Raises (from :meth:`connect`):
        TileautoError: nothing answers at ``address`` (within 10 s, not Ray's minutes of
            retries), or ``"auto"`` finds no cluster on this machine.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        node_retries: int = 3,
        share_files: bool = True,
        init_kwargs: dict[str, Any] | None = None,
        source: str = "address",
    ) -> None:
        self.address = address
        self.source = source
        self.node_retries = node_retries
        self.sharing = share_files
        self.init_kwargs = dict(init_kwargs or {})
        self._lock = threading.Lock()
        # node -> the reservation of the node's cores while configs are timed there
        self._holds: dict[str, _Hold] = {}
        # node -> the ref of a probe of its hardware started early (see RayBuilder.start)
        self._early_probes: dict[str, Any] = {}
        self._token: tuple[str, str] | None = None  # see share_files
        self._joined = False  # connect() ran once (it looks at a Ray already there then)
        self.probed: dict[str, dict[str, Any]] = {}  # node -> its hardware probe's answer

    def connect(self) -> Any:
        """Join (or start) the cluster once; the ``ray`` module."""
        ray = import_ray()
        with self._lock:
            local = self.address in (None, "local") and not os.environ.get("RAY_ADDRESS")
            if local and not self._joined and ray.is_initialized():
                if self.own_node_lost(ask_gcs=True):
                    ray.shutdown()  # a Ray whose node died runs nothing again: start a new one
            self._joined = True
            if not ray.is_initialized():
                kwargs = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
                address, source = self.address, self.source
                from_env = address is None and bool(os.environ.get("RAY_ADDRESS"))
                if from_env:
                    address, source = os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
                if address in (None, "local"):
                    # a local cluster of its own (Ray takes these settings only for a new
                    # one), even where `ray start` runs one on this machine: Ray would join
                    # that one for address=None (and refuse the settings)
                    address = "local"
                    kwargs.setdefault("_system_config", dict(LOCAL_SYSTEM_CONFIG))
                elif address != "auto":
                    _check_reachable(address, source)
                try:
                    # RAY_ADDRESS: Ray reads it itself (under `ray job submit`, with the job's
                    # runtime environment)
                    ray.init(address=None if from_env else address, **kwargs)
                except ConnectionError as exc:
                    if address in ("auto", "local"):
                        raise TileautoError(
                            f"{source}={address!r}: no Ray cluster to join ({exc}). Start one "
                            "(`ray start --head`), give its address, or unset "
                            f"{source} to let tileauto start a local Ray"
                        ) from None
                    # something answers there (_check_reachable), but Ray could not join it
                    raise TileautoError(
                        f"{source}={address!r}: something answers there, but Ray could not "
                        f"join it as a cluster ({exc}). Is it the head's GCS port (6379 by "
                        "default), of a cluster of the same Ray version as this process's "
                        f"({getattr(ray, '__version__', '?')}), and does this process have "
                        "the cluster's token where it requires one (`RAY_AUTH_TOKEN`, "
                        "~/.ray/auth_token; without it, Ray's log above says "
                        "'Unauthenticated')?"
                    ) from None
        return ray

    def own_node_lost(self, *, ask_gcs: bool = False) -> str | None:
        """Why this process's own Ray node is gone, or None while it runs (or is not known:
        only a node this process started is watched, by its raylet process; ``ask_gcs``: also
        dead for the cluster, which may say so before the raylet process has ended)."""
        ray = import_ray()
        raylet, logs = _local_raylet(ray)
        if raylet is None:
            return None
        if raylet.poll() is not None:
            how = f"exited with code {raylet.returncode}"
        elif ask_gcs and not any(
            n["Alive"] and n["NodeID"] == ray.get_runtime_context().get_node_id()
            for n in ray.nodes()
        ):
            how = "left the cluster"
        else:
            return None
        return (
            f"the Ray node of this process died: its raylet (pid {raylet.pid}) {how}. "
            "Ray ends a node when its raylet or one of the agents it "
            "fate-shares with (DashboardAgent, RuntimeEnvAgent) dies, for instance killed or "
            f"out of memory ({logs}/raylet.err says which). Nothing "
            "runs on that Ray any more: tune again (tileauto starts a new local Ray) or with "
            "executor='local'"
        )

    def check_own_node(self, *, ask_gcs: bool = False) -> None:
        """Raise :class:`RayNodeLostError` once this process's own Ray node is gone."""
        why = self.own_node_lost(ask_gcs=ask_gcs)
        if why is not None:
            raise RayNodeLostError(why)

    def nodes(self) -> dict[str, dict[str, float]]:
        """The alive nodes: node id -> resources."""
        ray = self.connect()
        return {n["NodeID"]: dict(n["Resources"]) for n in ray.nodes() if n["Alive"]}

    def node_alive(self, node_id: str | None) -> bool:
        return node_id is not None and node_id in self.nodes()

    def cpus(self) -> int:
        """CPUs of the alive nodes: how many compiles run at once."""
        return int(sum(r.get("CPU", 0.0) for r in self.nodes().values()))

    # -- the cores of timing nodes ---------------------------------------------------------------
    def hold_cores(self, node_id: str) -> None:
        """Hold every CPU of ``node_id`` (waits for the compiles running there to end); the
        nodes held already stay held (several run actors time at once, one per node).

        The hold is a placement group pinned to the node by its ``ray.io/node-id`` label: a
        reservation without a process, made and given back in milliseconds. On a Ray whose
        nodes have no such label it is an actor with the node's CPUs (a process started per
        hold, about a second).

        Raises:
            NodeLost: the node died before its cores were free.
        """
        ray = self.connect()
        with self._lock:
            if node_id in self._holds:
                return
        nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        cpus = nodes.get(node_id, {}).get("Resources", {}).get("CPU", 0.0)
        if cpus <= 0:
            return
        labelled = nodes[node_id].get("Labels", {}).get(_NODE_LABEL) == node_id
        hold = _placement_hold(ray, node_id, cpus) if labelled else None
        if hold is None:
            hold = _actor_hold(ray, node_id, cpus)
        try:
            while not ray.wait([hold.ready], timeout=1.0)[0]:
                if not self.node_alive(node_id):
                    raise NodeLost(f"node {node_id[:12]} was lost while its cores were reserved")
            ray.get(hold.ready)
        except BaseException as exc:
            hold.release()
            if isinstance(exc, ray.exceptions.RayError):
                raise NodeLost(
                    f"node {node_id[:12]} was lost while its cores were reserved"
                ) from exc
            raise
        with self._lock:
            self._holds[node_id] = hold

    def held_nodes(self) -> set[str]:
        with self._lock:
            return set(self._holds)

    def release_cores(self) -> None:
        """Give back the cores held for timing (a build is about to use them)."""
        with self._lock:
            holds, self._holds = list(self._holds.values()), {}
        for hold in holds:
            hold.release()

    # -- the driver's files, seen from the nodes -----------------------------------------------
    def share_files(self, directory: Path) -> tuple[str, str] | None:
        """A token file in ``directory`` (the driver's staging folder), made once: a job that
        reads it back shares the driver's files (the same machine, or a shared file system)
        and reads and writes kernel folders in place instead of sending them as bytes."""
        if not self.sharing:
            return None
        with self._lock:
            if self._token is None:
                value = uuid.uuid4().hex
                path = Path(directory) / f".tileauto-ray-{value[:12]}"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(value)
                self._token = (str(path), value)
            return self._token

    @property
    def token(self) -> tuple[str, str] | None:
        """The token of :meth:`share_files`, once made."""
        return self._token

    # -- probes started early ------------------------------------------------------------------
    def add_probes(self, probes: dict[str, Any]) -> None:
        """Probes (:func:`~tileauto.scale.ray.node.probe`) of a CPU target already started
        (node -> ref), for :func:`matching_nodes` to take instead of starting its own."""
        with self._lock:
            self._early_probes.update(probes)

    def take_probes(self) -> dict[str, Any]:
        with self._lock:
            probes, self._early_probes = self._early_probes, {}
        return probes


def _local_raylet(ray: Any) -> tuple[Any, str]:
    """The raylet process (a ``Popen``) of a Ray this process started, and its logs folder;
    (None, "") for a Ray it joined (or one whose internals are not these)."""
    try:
        node = ray._private.worker._global_node
        if node is None:
            return None, ""
        procs = node.all_processes.get(ray._private.ray_constants.PROCESS_TYPE_RAYLET) or []
        logs = node.get_logs_dir_path()
    except Exception:  # noqa: BLE001 - Ray's private layout: not watched without it
        return None, ""
    return (procs[0].process if procs else None), str(logs)


def _check_reachable(address: str, source: str) -> None:
    """Fail at once where Ray would retry for minutes: nothing accepts a connection at a
    cluster's ``host:port``; or where Ray would fail in the first compile: Ray Client
    (``ray://``), which does not carry the compile tasks' streamed answers."""
    if address.startswith("ray://"):
        raise TileautoError(
            f"{source}={address!r}: Ray Client (ray://) addresses are not supported: it does "
            "not carry the streamed answers of tileauto's compile tasks. Give the head's "
            "host:port (6379 by default) from a machine that reaches the cluster's nodes, or "
            "`auto` on a node of the cluster, or submit the tuning with `ray job submit`"
        )
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")  # an IPv6 address
    if not sep or not host or not port.isdigit():
        raise TileautoError(
            f"{source} must be 'auto' or a Ray cluster's host:port, got {address!r}"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise TileautoError(
            f"{source}={address!r}: nothing answers at {host}:{port} ({exc}): no Ray cluster "
            f"is reachable there. Start one (`ray start --head --port={port}` on {host}), fix "
            f"the address, or unset {source} to let tileauto start a local Ray"
        ) from None


class _CoreHold:
    """An actor that does nothing but hold CPUs (its ``num_cpus``) while it lives."""

    def ready(self) -> bool:
        return True


_NODE_LABEL = "ray.io/node-id"  # the label Ray gives each node: its id


@dataclass
class _Hold:
    """Cores reserved on a node: ``ready`` resolves once they are ours; ``release`` gives
    them back (never raises: the node may be gone)."""

    ready: Any
    release: Callable[[], None]


def _placement_hold(ray: Any, node_id: str, cpus: float) -> _Hold | None:
    """A placement group of ``cpus`` CPUs on the node; None on a Ray without label selectors."""
    from ray.util import placement_group, remove_placement_group

    try:
        group = placement_group(
            [{"CPU": cpus}], strategy="STRICT_PACK", bundle_label_selector=[{_NODE_LABEL: node_id}]
        )
    except TypeError:  # a Ray before label selectors
        return None

    def release() -> None:
        try:
            remove_placement_group(group)
        except Exception:  # noqa: BLE001 - removed already, or Ray is gone
            pass

    return _Hold(group.ready(), release)


def _actor_hold(ray: Any, node_id: str, cpus: float) -> _Hold:
    actor = (
        _actor_class(ray, _CoreHold)
        .options(num_cpus=cpus, scheduling_strategy=_on_node(ray, node_id), max_restarts=0)
        .remote()
    )

    def release() -> None:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - its node may be gone already
            pass

    return _Hold(actor.ready.remote(), release)


# -- hardware ---------------------------------------------------------------------------------
def matching_nodes(cluster: RayCluster, device: str) -> list[str]:
    """The alive nodes whose hardware for ``device`` is the driver's (CPU targets).

    Raises:
        NoMatchingNodeError: none matches (with what each node has).
    """
    ray = cluster.connect()
    want = local_hardware(device)
    nodes = {n: r for n, r in cluster.nodes().items() if r.get("CPU", 0.0) > 0}
    # the builder's start probed the nodes already (while the runner was being set up)
    early = cluster.take_probes() if device == "cpu" else {}
    refs = {
        node: early[node]
        if node in early
        else ray.remote(probe)
        .options(num_cpus=0, max_retries=0, scheduling_strategy=_on_node(ray, node))
        .remote(device, list(sys.path))
        for node in nodes
    }
    found: list[str] = []
    others: dict[str, Any] = {}
    for node, ref in refs.items():
        try:
            got = ray.get(ref, timeout=_START_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a node that cannot answer is not used
            others[node[:12]] = f"{type(exc).__name__}"
            continue
        cluster.probed[node] = got
        if got["hardware"] == want:
            found.append(node)
        else:
            others[node[:12]] = got["hardware"]
    if not found:
        raise NoMatchingNodeError(
            f"no node of the Ray cluster matches this {device} target's hardware {want}: "
            f"the nodes have {others or 'no CPUs'}; timings from different hardware are "
            "never compared, so tuning did not start"
        )
    if others:
        log.info("nodes left out (other hardware): %s", others)
    return found


# -- helpers for jobs -------------------------------------------------------------------------
def _settings_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("TILEAUTO_")}


def _apply_settings(env: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith("TILEAUTO_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)


def _on_node(ray: Any, node_id: str, *, soft: bool = False) -> Any:
    """On that node (``soft``: or anywhere once it is gone)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


_CLASSES: dict[tuple[int, type], Any] = {}


def _actor_class(ray: Any, cls: type) -> Any:
    key = (id(ray), cls)
    if key not in _CLASSES:
        _CLASSES[key] = ray.remote(cls)
    return _CLASSES[key]


def _folder_files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def shares_files(token: tuple[str, str] | None) -> bool:
    """On a node: whether it sees the driver's files (the token file reads back)."""
    if token is None:
        return False
    try:
        return Path(token[0]).read_text() == token[1]
    except OSError:
        return False


def _run_files(directory: Path) -> dict[str, bytes]:
    """What a run needs of a kernel folder: the library and its record, not the sources
    (kept for people to read: most of the folder's bytes)."""
    return {
        name: data
        for name, data in _folder_files(directory).items()
        if not name.endswith(_READ_ONLY_FILES)
    }


def _write_files(directory: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


# -- builds -----------------------------------------------------------------------------------
def _warm_task(setup: bytes, probed: Any = None) -> dict[str, Any]:
    """On a node, in a worker the compiles then reuse (a Ray task of the compiles' runtime
    environment, with a compile's CPUs): import what a compile needs (TVM's compiler, the
    factory's modules), so that the worker's first compile does not; say which worker, and
    whether TVM is in it now. ``probed``, the node's probe answer, is not used: taking it
    makes the warm-up wait for the probe, whose worker then runs it (see RayBuilder.start)."""
    import ray

    from tileauto.jit.compiler import load_compiler

    started = time.monotonic()
    path, env, payload = cloudpickle.loads(setup)
    use_path(path)
    _apply_settings(env)
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

    Yields the node id first (the driver counts the timeout from then), then
    ``("ok", artifact JSON, files)``, ``("here", artifact JSON)`` when the node shares the
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
        _apply_settings(env)
        factory, compile_args = cloudpickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001 - the node's fault, not the config's
        yield ("unloadable", _not_loaded(exc, ray.util.get_node_ip_address()))
        return
    folder, token = here
    if shares_files(token):
        try:
            artifact = _compile_job(factory, request, compile_args, folder)
        except BaseException as exc:  # noqa: BLE001 - a failed compile is data
            yield ("error", type(exc).__name__, str(exc))
            return
        yield ("here", artifact.to_json())
        return
    with tempfile.TemporaryDirectory(prefix="tileauto-ray-build-") as tmp:
        out = Path(tmp) / "kernel"
        try:
            artifact = _compile_job(factory, request, compile_args, str(out))
        except BaseException as exc:  # noqa: BLE001 - a failed compile is data
            yield ("error", type(exc).__name__, str(exc))
            return
        yield ("ok", artifact.to_json(), _folder_files(out))


def _not_loaded(exc: BaseException, node_ip: str, what: str = "the factory") -> str:
    """Why a node could not load ``what`` (the factory and compile arguments, or the tuning's
    functions a run actor calls): most often a module of the user's that the driver imports
    and the node does not have."""
    why = f"{what} could not be loaded on Ray node {node_ip}: {type(exc).__name__}: {exc}"
    if not isinstance(exc, ImportError):
        return why
    return (
        f"{why} (every node needs the modules of the tuning's functions: install them there, "
        "or have Ray ship them: ray.init(runtime_env={'working_dir': ...}) before tuning, or "
        "ray job submit --working-dir; docs/scale.md)"
    )


@dataclass
class _Job:
    index: int
    ref: Any = None  # the task's ObjectRefGenerator
    node: str | None = None
    started: float | None = None
    submitted: float = 0.0
    attempts: int = 0
    dead_before: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Unfit:
    """A compile task's node could not load the factory (see :func:`_not_loaded`)."""

    node: str | None
    reason: str


class RayBuilder:
    """Compiles configs as Ray tasks (a :class:`~tileauto.tune.stages.BuildStage`).

    Args:
        factory: the kernel factory (sent by cloudpickle, once per build, via the object store).
        compile_args: target, out_idx and pass options.
        staging_dir: the driver's folder for built kernels (one ``build-<id>`` per build).
        timeout_s: per-config compile limit, from the moment the task starts on its node.
        cluster: the cluster (default: ``RayCluster()``, this process's Ray or a local one).
        num_cpus: CPUs each compile task reserves.

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
    ) -> None:
        self.factory = factory
        self.compile_args = compile_args
        self.staging_dir = Path(staging_dir)
        self.timeout_s = timeout_s
        self.cluster = cluster if cluster is not None else RayCluster()
        self.num_cpus = num_cpus
        self.submitted = 0
        self.resubmitted = 0
        self.unfit: dict[str, str] = {}
        self._turn = 0  # compiles sent to a fit node so far: whose turn is next (_fit_node)
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._inflight: set[Any] = set()
        self._workers: int | None = None
        self._jobs: dict[Any, _Job] = {}
        self._warming: dict[Any, tuple[str, str]] = {}  # start()'s warm-ups: (job, node)
        # called (on the build's thread) as a compile starts on a node: (request index, node)
        self.on_start: Callable[[int, str | None], None] | None = None

    @property
    def workers(self) -> int:
        """How many configs compile at once: the cluster's CPUs (read once)."""
        if self._workers is None:
            self._workers = max(1, int(self.cluster.cpus() // max(self.num_cpus, 1e-9)))
        return self._workers

    def start(self) -> None:
        """Join the cluster, probe each node's hardware and warm up a worker per compile slot,
        without waiting for any of it.

        A Ray worker is a fresh interpreter: it would import TVM's compiler (over a second)
        in its first compile. Each warm-up task holds a compile's CPUs while it imports that
        (and the factory's modules), so the compiles, which wait for those CPUs, then run in
        the warm workers. The probe of each node (what :func:`matching_nodes` asks) is a task
        of its own, started first, with no CPU and no heavy import: it answers in the time a
        worker starts, even on a node whose CPUs are busy. The warm-ups take the probe's
        answer as an argument, so they wait for it: the probe's worker, idle by then, runs
        one of them and becomes a compile worker, and Ray starts no worker that runs nothing.
        """
        ray = self.cluster.connect()
        self.cluster.share_files(self.staging_dir)  # before the run actors start: they look
        setup = pickling.dumps((list(sys.path), _settings_env(), self._payload()))
        probe_task, warm_task = ray.remote(probe), ray.remote(_warm_task)
        job = ray.get_runtime_context().get_job_id()
        probes: dict[str, Any] = {}
        warming: dict[Any, tuple[str, str]] = {}
        for node, resources in self.cluster.nodes().items():
            slots = int(resources.get("CPU", 0.0) // max(self.num_cpus, 1e-9))
            if slots <= 0:
                continue
            pinned = _on_node(ray, node)
            probes[node] = probe_task.options(
                num_cpus=0, max_retries=0, scheduling_strategy=pinned, runtime_env=_COMPILE_ENV
            ).remote("cpu", list(sys.path))
            with _WARMED_LOCK:
                if (job, node) in _WARMED:
                    continue  # an earlier build of this process warmed its workers (kept idle)
            for _ in range(slots):
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
    ) -> list[BuildResult]:
        """Compile every request; ``on_result`` as each ends; results index-aligned."""
        if not requests:
            return []
        ray = self.cluster.connect()
        self.cluster.release_cores()  # a timing run of this session is over: compile there
        batch_dir = self.staging_dir / f"build-{uuid.uuid4().hex[:12]}"
        token = self.cluster.share_files(self.staging_dir)
        payload = self._payload()
        # sent with each task, not ray.put: Ray ends a driver that holds an object of the
        # object store of its own node when that node dies (exit code 1, no message)
        setup = pickling.dumps((list(sys.path), _settings_env(), payload))
        compile_task = ray.remote(_compile_task)
        options = {
            "num_cpus": self.num_cpus,
            "max_retries": 0,
            "retry_exceptions": False,
            "num_returns": "streaming",
            "runtime_env": _COMPILE_ENV,
        }
        task = compile_task.options(**options)
        results: list[BuildResult | None] = [None] * len(requests)
        jobs: dict[Any, _Job] = {}
        self._jobs = jobs

        def submit(job: _Job, dead: frozenset[str], node: str | None = None) -> None:
            """``node``: run it there (a node that loads the factory) unless that node is
            gone; a submission to another node is not an attempt (see node_retries)."""
            job.attempts += node is None
            job.node, job.started = None, None
            job.submitted = time.monotonic()
            job.dead_before = dead  # the nodes already dead when it was submitted
            folder = batch_dir / f"{requests[job.index].index:04d}"
            there = (
                task
                if node is None
                else compile_task.options(
                    **options, scheduling_strategy=_on_node(ray, node, soft=True)
                )
            )
            job.ref = there.remote(setup, requests[job.index], (str(folder), token))
            jobs[job.ref] = job
            with self._lock:
                self._inflight.add(job.ref)
            self.submitted += 1

        def finish(job: _Job, result: BuildResult) -> None:
            jobs.pop(job.ref, None)
            with self._lock:
                self._inflight.discard(job.ref)
            if results[job.index] is None:  # one result per request, whatever happened
                results[job.index] = result
                if on_result is not None:
                    on_result(result)

        self._known_nodes = set(self.cluster.nodes())
        dead = frozenset(self._dead_nodes())  # once, not per job: a GCS query costs 1-2 ms
        for i in range(len(requests)):
            if self._cancelled.is_set():
                break
            submit(_Job(i), dead)
        try:
            while jobs and not self._cancelled.is_set():
                self.cluster.check_own_node()
                now = time.monotonic()
                deadlines = [j.started + self.timeout_s for j in jobs.values() if j.started]
                wait = min([_WAKE_S, *(max(0.0, d - now) for d in deadlines)])
                ready, _ = ray.wait(list(jobs), num_returns=1, timeout=wait)
                for ref in ready:
                    job = jobs[ref]
                    outcome = self._next(ray, job, requests[job.index], batch_dir)
                    if outcome == "started":
                        if self.on_start is not None:
                            self.on_start(job.index, job.node)
                        continue
                    if outcome == "again" or isinstance(outcome, _Unfit):
                        jobs.pop(job.ref, None)
                        with self._lock:
                            self._inflight.discard(job.ref)
                    if outcome == "again":
                        self.cluster.check_own_node(ask_gcs=True)
                        self.resubmitted += 1
                        submit(job, frozenset(self._dead_nodes()))
                        continue
                    if isinstance(outcome, _Unfit):
                        submit(job, dead, self._fit_node(outcome))
                        continue
                    finish(job, outcome)
                now = time.monotonic()
                for job in list(jobs.values()):
                    if job.started is not None and now - job.started > self.timeout_s:
                        _cancel(ray, job.ref)
                        finish(
                            job,
                            _failed(
                                requests[job.index],
                                BuildStatus.TIMEOUT,
                                f"compile timed out after {self.timeout_s:g} s; its Ray worker "
                                "was killed",
                                now - job.started,
                            ),
                        )
        except BaseException:
            self.cancel()
            raise
        for job in list(jobs.values()):
            _cancel(ray, job.ref)
            finish(job, _failed(requests[job.index], BuildStatus.CANCELLED, "cancelled", 0.0))
        for i, request in enumerate(requests):
            if results[i] is None:
                cancelled = _failed(request, BuildStatus.CANCELLED, "cancelled", 0.0)
                results[i] = cancelled
                if on_result is not None:
                    on_result(cancelled)
        return [r for r in results if r is not None]

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

    def running_nodes(self) -> set[str]:
        """Nodes running a compile of this builder now (for tests and reports)."""
        return {j.node for j in list(self._jobs.values()) if j.node is not None}

    def _dead_nodes(self) -> set[str]:
        ray = import_ray()
        return {n["NodeID"] for n in ray.nodes() if not n["Alive"]}

    def _next(self, ray: Any, job: _Job, request: BuildRequest, batch_dir: Path) -> Any:
        """The next thing a compile task says: "started", "again" (its node was lost) or
        its BuildResult."""
        exc_types = ray.exceptions
        try:
            value = ray.get(next(job.ref))
        except StopIteration:
            value = None
            error: BaseException | None = RuntimeError("the compile task returned nothing")
        except exc_types.TaskCancelledError:
            return _failed(request, BuildStatus.CANCELLED, "cancelled", 0.0)
        except (exc_types.NodeDiedError, exc_types.ObjectLostError) as exc:
            error = exc
            if job.attempts <= self.cluster.node_retries:
                log.info("compile of %s lost with its node; submitted again", request.config)
                return "again"
        except exc_types.WorkerCrashedError as exc:
            error = exc
            lost = (
                not self.cluster.node_alive(job.node)
                if job.node is not None
                else bool(self._dead_nodes() - job.dead_before)
            )
            if lost and job.attempts <= self.cluster.node_retries:
                log.info("compile of %s lost with its node; submitted again", request.config)
                return "again"
            if not lost:
                return _failed(
                    request,
                    BuildStatus.CRASH,
                    f"compiler crashed: its Ray worker died ({first_lines(str(exc), 1)})",
                    _since(job),
                )
        except exc_types.OutOfMemoryError as exc:
            return _failed(request, BuildStatus.OUT_OF_MEMORY, f"compiler {exc}", _since(job))
        except exc_types.RayTaskError as exc:  # the task raised: an error, its worker lives
            message = first_lines(_ray_error_text(exc))
            return _failed(request, BuildStatus.ERROR, message, _since(job))
        except exc_types.RayError as exc:
            error = exc
        else:
            error = None
        if error is not None:
            return _failed(
                request,
                BuildStatus.CRASH,
                f"compile failed in Ray: {first_lines(_ray_error_text(error), 2)}",
                _since(job),
            )
        if job.started is None:
            job.node, job.started = value, time.monotonic()
            return "started"
        wall = _since(job)
        if value[0] == "unloadable":
            return _Unfit(job.node, value[1])
        if value[0] == "error":
            _, type_name, message = value
            oom = type_name == "MemoryError" or message.startswith("MemoryError")
            status = BuildStatus.OUT_OF_MEMORY if oom else BuildStatus.ERROR
            log.info("config %s failed to compile: %s", request.config, message.splitlines()[:1])
            return _failed(request, status, first_lines(message), wall)
        out = batch_dir / f"{request.index:04d}"
        if value[0] == "here":  # compiled into its folder here
            artifact = KernelArtifact.from_json(value[1], directory=out)
        else:
            _, data, files = value
            out.mkdir(parents=True, exist_ok=True)
            _write_files(out, files)
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
            wall_s=wall,
        )


def _ray_error_text(exc: BaseException) -> str:
    """``Type: message`` of what a Ray error says: the cause a task raised (a RayTaskError's
    own text is the task's name and traceback), without the terminal's colours."""
    cause = getattr(exc, "cause", None)
    cause = cause if isinstance(cause, BaseException) else exc
    return _ANSI.sub("", f"{type(cause).__name__}: {cause}")


def _since(job: _Job) -> float:
    return time.monotonic() - (job.started if job.started is not None else job.submitted)


def _failed(request: BuildRequest, status: BuildStatus, error: str, wall: float) -> BuildResult:
    return BuildResult(
        index=request.index,
        config=request.config,
        status=status,
        error=error,
        compile_s=wall,
        wall_s=wall,
    )


def _cancel(ray: Any, ref: Any) -> None:
    try:
        ray.cancel(ref, force=True)
    except Exception:  # noqa: BLE001 - already finished, or its node is gone
        pass


# -- runs -------------------------------------------------------------------------------------
class _RunActor:
    """The run worker as a Ray actor: :mod:`tileauto.run.worker`'s functions, called by
    :class:`RayWorker` with the driver's import path and settings, on built folders shipped
    as bytes."""

    def __init__(self) -> None:
        self.scratch = Path(tempfile.gettempdir()) / "tileauto-ray" / f"run-{os.getpid()}"
        _remove_stale_scratch(self.scratch.parent)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.folders: dict[str, Path] = {}

    def ping(
        self, device: str, path: list[str], token: tuple[str, str] | None = None
    ) -> dict[str, Any]:
        """Where the actor runs, and its size with the run worker's code imported: the memory
        limit counts from there, as for a local run worker (which starts with TVM and torch
        imported), and the default limit from the node's memory available now; whether it
        sees the driver's files (``token``: see :meth:`RayCluster.share_files`)."""
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
            "shares_files": shares_files(token),
        }

    def preload(self, path: list[str], env: dict[str, str], payload: bytes) -> str | None:
        """Unpickle the tuning's own functions (timer, supply and reference programs), which
        imports their modules now, while the configs compile, instead of in the first job;
        why they could not be loaded on this node, if they could not."""
        import ray

        use_path(path)
        _apply_settings(env)
        try:
            with collector_paused():
                cloudpickle.loads(payload)
        except BaseException as exc:  # noqa: BLE001 - the node's fault: the driver's to say
            return _not_loaded(exc, ray.util.get_node_ip_address(), "the tuning's functions")
        return None

    def call(
        self,
        path: list[str],
        env: dict[str, str],
        payload: bytes,
        folders: dict[str, dict[str, bytes]],
    ) -> tuple[str, Any]:
        use_path(path)
        _apply_settings(env)
        for key, files in folders.items():
            local = self.scratch / f"{len(self.folders):05d}"
            _write_files(local, files)
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


def _remove_stale_scratch(parent: Path) -> None:
    """Folders of run actors that died (killed actors leave theirs)."""
    import psutil

    if not parent.is_dir():
        return
    for folder in parent.glob("run-*"):
        try:
            pid = int(folder.name.split("-", 1)[1])
        except ValueError:
            continue
        if not psutil.pid_exists(pid):
            shutil.rmtree(folder, ignore_errors=True)


def _map_artifacts(value: Any, fn: Callable[[KernelArtifact], KernelArtifact]) -> Any:
    """``value`` with every artifact in it (alone, in a RunRequest, in a list) mapped."""
    from tileauto.run.worker import RunRequest

    if isinstance(value, KernelArtifact):
        return fn(value)
    if isinstance(value, RunRequest):
        return dataclasses.replace(value, artifact=fn(value.artifact))
    if isinstance(value, (list, tuple)):
        mapped = [_map_artifacts(v, fn) for v in value]
        return mapped if isinstance(value, list) else tuple(mapped)
    return value


_WATCH_POLL_S = 0.05  # how often a run actor's memory is looked at (as a local worker's)
_WATCH_SCAN_S = 1.0  # how often for new children (a scan of every process of the node)
_VERDICT_S = 5.0  # a dead actor's watcher answers within a poll; this only bounds a lost one


def _memory_watch_class() -> type:
    """The memory watcher's actor class, made in a function so that Ray ships it by value:
    its process imports psutil, not this module (torch, TVM), and starts in about the time
    of a bare Ray worker. Everything it uses is the standard library's, psutil's or its own."""

    class _MemoryWatch:
        """An actor beside a run actor (pinned to its node, no CPU): kills it when it grows
        past its memory limit. The driver may be on another machine, where the actor's
        process cannot be seen."""

        def __init__(self) -> None:
            import psutil  # noqa: F401 - once, while the run actor starts

        def ready(self) -> int:
            return os.getpid()

        def watch(self, pid: int, baseline: int, limit: int) -> int | None:
            """Poll the resident set of ``pid`` and its children until it is more than
            ``limit`` bytes above ``baseline``: then kill them and return the growth. None
            once ``pid`` is gone (it died of something else)."""
            import psutil

            try:
                proc = psutil.Process(pid)
            except psutil.Error:
                return None
            children: list[psutil.Process] = []
            scan_at = 0.0
            while True:
                try:
                    if time.monotonic() >= scan_at:
                        children = proc.children(recursive=True)
                        scan_at = time.monotonic() + _WATCH_SCAN_S
                    rss = proc.memory_info().rss
                    if rss == 0 and proc.status() == psutil.STATUS_ZOMBIE:
                        return None  # dead, not reaped yet
                except psutil.Error:
                    return None
                for child in children:
                    try:
                        rss += child.memory_info().rss
                    except psutil.Error:
                        pass  # ended since the scan
                if rss - baseline > limit:
                    for victim in (proc, *children):
                        try:
                            victim.kill()
                        except psutil.Error:
                            pass
                    return rss - baseline
                time.sleep(_WATCH_POLL_S)

    return _MemoryWatch


_MemoryWatch = _memory_watch_class()


def _grown(ray: Any, watch: Any, wait_s: float) -> int | None:
    """What the watcher ``watch`` (its answer's ref) says within ``wait_s``: how much the
    actor grew when it was killed for it; None when it was not (gone otherwise, the watcher
    lost, or no answer yet)."""
    if not ray.wait([watch], timeout=wait_s)[0]:
        return None
    try:
        grown: int | None = ray.get(watch)
    except ray.exceptions.RayError:
        return None
    return grown


def _out_of_memory(limit: int) -> WorkerCrashed:
    return WorkerCrashed(
        f"out of memory: the Ray run actor took more than {limit / 2**30:.1f} GiB and was killed",
        out_of_memory=True,
    )


class RayWorker:
    """A run actor that stands in for :class:`tileauto.workers.procs.Worker` in a Runner.

    ``call`` runs a function in the actor and raises what a local worker raises
    (:class:`WorkerTimeout`, :class:`WorkerCrashed`, :class:`RemoteJobError`), plus
    :class:`NodeLost` when the actor's node died (not the config's fault).
    """

    def __init__(
        self, runner: RayRunner, device: str, threads: int, memory_limit_mb: int = -1
    ) -> None:
        self.runner = runner
        self.device = device
        self.threads = threads
        self.memory_limit_mb = memory_limit_mb  # -1: 90% of the node's memory available
        self.memory_limit_bytes = 0  # the current actor's limit (known once it started)
        self.name = f"ray-run-{device}"
        self.actor: Any = None
        self.watcher: Any = None  # the actor's memory watcher (see _MemoryWatch)
        self._watch: Any = None  # its answer: the actor was killed for its memory, or died
        self.node: str | None = None
        self.pid: int | None = None
        self.pids: list[int] = []  # every actor process this worker started (tests look)
        self.watcher_pids: list[int] = []  # and every watcher's
        self._shipped: set[str] = set()
        self.shares_files = False  # the actor reads the driver's kernel folders in place
        self._busy = False
        self._lock = threading.RLock()  # one job at a time, as a local worker
        self._kills = 0  # kill() calls: a start in progress gives up when this moves
        self.starter: threading.Thread | None = None  # its start ahead of the first job

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
                _actor_class(ray, _RunActor)
                .options(
                    num_cpus=0,
                    num_gpus=1 if self.device == "cuda" else 0,
                    scheduling_strategy=_on_node(ray, node),
                    max_restarts=0,
                    max_task_retries=0,
                    runtime_env={"env_vars": env},
                )
                .remote()
            )
            # started at the same time (it is ready first): no CPU, so a core hold lets it be
            watcher = (
                _actor_class(ray, _MemoryWatch)
                .options(
                    num_cpus=0,
                    scheduling_strategy=_on_node(ray, node),
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
                refs.append(actor.preload.remote(list(sys.path), _settings_env(), preload))
            except Exception:  # noqa: BLE001 - not picklable: the first job says so
                pass
            try:
                info, watcher_pid, *loaded = self._started(ray, refs, kills)
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
            mb = self.memory_limit_mb
            limit = mb * 2**20 if mb > 0 else int(info["available"] * 0.9)
            self._watch = watcher.watch.remote(info["pid"], info["rss"], limit)
            self.actor, self.watcher, self.node, self.pid = actor, watcher, node, info["pid"]
            self.memory_limit_bytes = limit
            self.pids.append(info["pid"])
            self.watcher_pids.append(watcher_pid)
            self._shipped = set()
            self.shares_files = bool(info.get("shares_files"))
            return self

    def _started(self, ray: Any, refs: list[Any], kills: int) -> list[Any]:
        """The answers of a new actor and its watcher; :class:`_StartStopped` as soon as
        :meth:`kill` is called meanwhile (a thread must not wait in Ray for minutes after
        its session ended: Ray may be shut down under it)."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=_START_POLL_S)
            if self._kills != kills:
                raise _StartStopped
            self.runner.cluster.check_own_node()
            if len(ready) == len(refs):
                return list(ray.get(refs))
            if time.monotonic() > deadline:
                raise ray.exceptions.GetTimeoutError(
                    f"the run actor did not answer within {_START_TIMEOUT_S:g} s"
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
                folders[key] = _run_files(Path(artifact.directory))
            return artifact

        _map_artifacts(args, ship)
        payload = pickling.dumps((fn, args))
        watch, limit = self._watch, self.memory_limit_bytes
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._busy = True
        try:
            ref = self.actor.call.remote(list(sys.path), _settings_env(), payload, folders)
            waiting = [ref, watch]
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                # in short waits: a job on a node that died is not a config that timed out
                wait = _START_POLL_S if left is None else min(left, _START_POLL_S)
                ready, _ = ray.wait(waiting, num_returns=1, timeout=wait)
                if not ready and self.runner.cluster.own_node_lost():
                    self.kill()
                    self.runner.cluster.check_own_node()
                if not ready and (deadline is None or time.monotonic() < deadline):
                    continue
                if not ready:
                    self.kill()
                    raise WorkerTimeout(
                        f"timed out after {timeout_s:g} s; worker {self.name} was killed"
                    )
                if ref in ready:
                    break
                if _grown(ray, watch, 0) is not None:
                    self.kill()
                    raise _out_of_memory(limit)
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
                killed_for_memory = _grown(ray, watch, _VERDICT_S) is not None
                self.kill()
                if killed_for_memory:
                    raise _out_of_memory(limit) from None
                oom = "memory" in str(exc).lower() and "OutOfMemory" in type(exc).__name__
                raise WorkerCrashed(
                    f"crashed: the Ray run actor died ({_actor_reason(exc)})",
                    out_of_memory=oom,
                ) from None
        finally:
            self._busy = False
        self._shipped.update(folders)
        if ray.wait([watch], timeout=0)[0]:
            # the watcher answered after the job did: the actor is gone; a new one (its
            # sessions set up again) runs the next job
            self.kill()
        if status == "ok":
            return value
        raise RemoteJobError(value)

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


def _start_quietly(worker: RayWorker) -> None:
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


class RayRunner(Runner):
    """Checks and times configs in a Ray actor (a :class:`~tileauto.tune.stages.RunStage`).

    A :class:`tileauto.run.runner.Runner` (the same inputs, reference, replacement after a crash
    or a timeout) whose worker is a :class:`RayWorker`. Args as ``Runner``'s, plus:

    Args:
        cluster: the cluster (default: ``RayCluster()``).
        reserve_cores: on a CPU target, hold every core of the timing node while timing.

    Attributes:
        nodes: the matching nodes (found by :meth:`start`), the first one used first.
        lost_nodes: nodes lost during the run (their jobs were run again elsewhere).
    """

    def __init__(
        self,
        profile: ProfileArgs,
        *,
        threads: int,
        memory_limit_mb: int = -1,
        device: str = "cpu",
        captured: Sequence[Any] | None = None,
        timer: Any = None,
        cluster: RayCluster | None = None,
        reserve_cores: bool = True,
    ) -> None:
        super().__init__(
            profile,
            threads=threads,
            memory_limit_mb=memory_limit_mb,
            device=device,
            captured=captured,
            timer=timer,
        )
        self.cluster = cluster if cluster is not None else RayCluster()
        self.reserve_cores = reserve_cores
        self.nodes: list[str] = []
        self.lost_nodes: list[str] = []
        self.unfit: dict[str, str] = {}  # node -> why the tuning's functions do not load there
        self._hardware: dict[str, Any] | None = None
        self._started = False
        self._lanes: list[_Lane] = []  # run actors on the other slots (see run_many)

    # -- placement -------------------------------------------------------------------------------
    def start(self) -> None:
        """Join the cluster and find the nodes whose hardware matches (before any compile).

        Raises:
            NoMatchingNodeError: no node matches.
        """
        self.cluster.connect()
        if self.device == "cpu":
            self.nodes = matching_nodes(self.cluster, "cpu")
            self._hardware = local_hardware("cpu")
        else:
            gpus = [n for n, r in self.cluster.nodes().items() if r.get("GPU", 0.0) >= 1]
            if not gpus:
                raise NoMatchingNodeError("no node of the Ray cluster has a GPU")
            self.nodes = gpus
        self._started = True
        if self.worker is None:
            # the actor's start (a process that imports torch and TVM: seconds) overlaps the
            # compiles; a job waits for it (the worker's lock)
            worker = self.make_worker(self.device, self.threads, self.memory_limit_mb)
            self.worker = worker  # type: ignore[assignment]  # stands in for a Worker
            worker.starter = background_thread(
                _start_quietly, worker, name="tileauto-ray-run-start"
            )
            # and one per other slot (the first slot is this runner's: see next_node)
            self._lanes_for(self.slots()[1:])

    def next_node(self) -> str:
        """The node for a new run actor: the first matching one still alive."""
        if not self._started:
            self.start()
        self.cluster.check_own_node(ask_gcs=True)
        alive = self.cluster.nodes()
        for node in self.nodes:
            if node in alive:
                return node
        if self.unfit:
            raise NoMatchingNodeError(
                f"no node matching the target is left to time on: on {len(self.unfit)} of "
                f"them, {next(iter(self.unfit.values()))}"
            )
        raise NoMatchingNodeError(
            f"every node matching the target was lost ({len(self.lost_nodes)} lost)"
        )

    def hardware_ok(self, node: str, hardware: dict[str, Any]) -> bool:
        """A new actor's hardware: the target's (GPU: the first actor's, when the driver has
        no GPU of that kind); a node that does not match is not used again."""
        if self._hardware is None:
            try:
                here = local_hardware(self.device)
            except Exception:  # noqa: BLE001 - no GPU on the driver
                here = None
            usable = here is not None and here.get("device", {}).get("name") != "no-gpu"
            self._hardware = here if usable else hardware
        if hardware == self._hardware:
            return True
        log.info("node %s left out: hardware %s, not %s", node[:12], hardware, self._hardware)
        self.nodes = [n for n in self.nodes if n != node]
        return False

    def loads_on(self, node: str, why_not: str | None) -> bool:
        """A new actor's answer to loading the tuning's functions (None: loaded); a node
        where they do not load (a module it lacks) is not used again."""
        if why_not is None:
            return True
        if node not in self.unfit:
            self.unfit[node] = why_not
            log.warning("Ray node %s left out of the timings: %s", node[:12], why_not)
        self.nodes = [n for n in self.nodes if n != node]
        return False

    def lost(self, node: str) -> None:
        if node not in self.lost_nodes:
            self.lost_nodes.append(node)
        self.nodes = [n for n in self.nodes if n != node]

    def make_worker(  # type: ignore[override]
        self, device: str, threads: int, memory_limit_mb: int = -1, *, fork_ok: bool = False
    ) -> RayWorker:
        return RayWorker(self, device, threads, memory_limit_mb)

    # -- node loss: the same job again, elsewhere -------------------------------------------------
    def setup(self, key: str | None = None) -> Any:
        try:
            return super().setup(key)
        except NodeLost:
            self._setup_errors.pop(self.first if key is None else key, None)
            self._ready.clear()
            raise

    def run(
        self,
        artifact: KernelArtifact,
        config: dict,
        *,
        is_reference: bool = False,
        time_it: bool = True,
    ) -> RunOutcome:
        for _ in range(self.cluster.node_retries):
            try:
                return super().run(artifact, config, is_reference=is_reference, time_it=time_it)
            except NodeLost as exc:
                log.info("%s; running %s again elsewhere", exc, config)
                self._ready.clear()
        return super().run(artifact, config, is_reference=is_reference, time_it=time_it)

    def retime(
        self, items: Sequence[tuple[KernelArtifact, dict]], rounds: int
    ) -> list[tuple[float, ...]] | None:
        for _ in range(self.cluster.node_retries + 1):
            lost = len(self.lost_nodes)
            got = super().retime(items, rounds)
            if got is not None or len(self.lost_nodes) == lost:
                return got
            self._ready.clear()
        return None

    def time_reference(self, warmup: int = 3, rep: int = 10) -> float | None:
        for _ in range(self.cluster.node_retries + 1):
            lost = len(self.lost_nodes)
            got = super().time_reference(warmup, rep)
            if got is not None or len(self.lost_nodes) == lost:
                return got
            self._ready.clear()
        return None

    # -- several slots: configs run in parallel ---------------------------------------------------
    def slots(self) -> list[str]:
        """A node per run actor that can time at once: each matching CPU node once (its
        actor holds all its cores), each GPU of a matching node once."""
        if not self._started:
            self.start()
        alive = self.cluster.nodes()
        if self.device == "cpu":
            return [n for n in self.nodes if n in alive]
        return [n for n in self.nodes if n in alive for _ in range(int(alive[n].get("GPU", 0)))]

    def run_many(
        self, items: Sequence[tuple[KernelArtifact, dict]]
    ) -> Iterator[tuple[int, RunOutcome]]:
        """Check and time ``items`` on every slot at once; yields ``(position, outcome)`` as
        each ends (on the caller's thread).

        This runner's own actor is one slot; a run actor for each other slot is started on
        first use and kept (set up with the same inputs and the reference made by the
        default config). A job whose node is lost goes back to the queue for another slot,
        and that slot's actor stops taking jobs.
        """
        slots = self.slots()
        mine = self.worker.node if isinstance(self.worker, RayWorker) else None
        if mine is not None and mine in slots:
            slots.remove(mine)
        else:
            slots = slots[1:]
        if not slots:  # one slot: this runner's actor, on the caller's thread
            for k, (artifact, config) in enumerate(items):
                yield k, self.run(artifact, config)
            return
        lanes: list[RayRunner] = [self, *self._lanes_for(slots)]
        todo = list(range(len(items)))
        lock = threading.Lock()
        done: queue.Queue[tuple[int, RunOutcome] | BaseException | None] = queue.Queue()

        def take() -> int | None:
            with lock:
                return todo.pop(0) if todo else None

        def work(lane: RayRunner) -> None:
            try:
                while (k := take()) is not None:
                    artifact, config = items[k]
                    try:
                        done.put((k, lane.run(artifact, config)))
                    except NodeLost:
                        with lock:
                            todo.insert(0, k)  # not the config's fault: another slot runs it
                        return
            except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread
                done.put(exc)
            finally:
                done.put(None)

        for i, lane in enumerate(lanes):
            background_thread(work, lane, name=f"tileauto-ray-run-{i}")
        running, left = len(lanes), len(items)
        while left:
            try:
                got = done.get(timeout=0.1)  # wakes for Ctrl-C
            except queue.Empty:
                continue
            if got is None:
                running -= 1
                if running == 0 and todo:  # every extra slot lost its node: run the rest here
                    while (j := take()) is not None:
                        left -= 1
                        yield j, self.run(*items[j])
                continue
            if isinstance(got, BaseException):
                self.kill()
                raise got
            left -= 1
            yield got

    def _lanes_for(self, slots: list[str]) -> list[_Lane]:
        """A lane per slot (a node, once per GPU on GPU targets): the ones made already for
        that node, then new ones (their actors start in the background)."""
        free = list(self._lanes)
        chosen: list[_Lane] = []
        for node in slots:
            lane = next((x for x in free if x.node == node), None)
            if lane is None:
                lane = _Lane(self, node)
                self._lanes.append(lane)
                worker = cast(RayWorker, lane.worker)
                worker.starter = background_thread(
                    _start_quietly, worker, name="tileauto-ray-run-start"
                )
            else:
                free.remove(lane)
            chosen.append(lane)
        return chosen

    def kill(self) -> None:
        """Kill every slot's run actor, and wait for the starts still in progress to give up
        (a fraction of a second): once closed, this runner has no thread left in Ray."""
        workers = [lane.worker for lane in self._lanes] + [self.worker]
        for lane in self._lanes:
            lane.kill_worker()
        super().kill()
        self.cluster.release_cores()
        for worker in workers:
            starter = getattr(worker, "starter", None)
            if starter is not None and starter is not threading.current_thread():
                starter.join(timeout=_START_POLL_S * 25)


class _OfMain(Generic[T]):
    """An attribute of a lane that is its main runner's (read and written there)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, lane: Any, owner: type | None = None) -> T:
        if lane is None:  # looked up on the class
            return cast(T, self)
        return cast(T, getattr(lane.main, self.name))

    def __set__(self, lane: Any, value: T) -> None:
        setattr(lane.main, self.name, value)


class _Lane(RayRunner):
    """Another slot of a :class:`RayRunner`: its own run actor, on its own node, sharing the
    runner's sessions (inputs, the reference), placement and faults."""

    def __init__(self, main: RayRunner, node: str) -> None:
        # the main runner's state, shared (the sessions' specs, with the reference), except
        # what belongs to one actor: the worker and which sessions it has set up
        self.__dict__.update(main.__dict__)
        self.main, self.node = main, node
        self._lanes = []
        self._ready = set()
        self._setup_lock = threading.Lock()
        self.worker = self.make_worker(main.device, main.threads, main.memory_limit_mb)  # type: ignore[assignment]

    # the sessions are the main runner's, made when its first config is built (perhaps after
    # this lane was made): read and written there
    spec = _OfMain[Any]("spec")
    first = _OfMain[str]("first")
    reference_signature = _OfMain[str]("reference_signature")

    def next_node(self) -> str:
        if self.node in self.main.nodes and self.cluster.node_alive(self.node):
            return self.node
        raise NodeLost(f"node {self.node[:12]} of a run slot was lost")

    def hardware_ok(self, node: str, hardware: dict[str, Any]) -> bool:
        return self.main.hardware_ok(node, hardware)

    def loads_on(self, node: str, why_not: str | None) -> bool:
        return self.main.loads_on(node, why_not)

    def lost(self, node: str) -> None:
        self.main.lost(node)

    # no retry elsewhere: a lost node ends this slot, and run_many gives the job to another
    run = Runner.run

    def kill_worker(self) -> None:
        if self.worker is not None:
            self.worker.kill()
