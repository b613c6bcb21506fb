"""The connection to a Ray cluster, and the cores of timing nodes held while configs are timed.

Ray is an optional dependency: nothing here imports it at module level; :func:`import_ray`
says which extra to install.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.errors import TileautoError, WorkerError

log = get_logger("ray")

RAY_EXTRA = "pip install 'tileauto[ray]'"
# how long a cluster's address may take to accept a connection (Ray retries for minutes)
_CONNECT_TIMEOUT_S = 10.0
START_TIMEOUT_S = 300.0  # an actor or probe start (a fresh process imports torch and TVM)
START_POLL_S = 0.2  # how often a start in progress looks whether it was stopped meanwhile
# Ray's settings for a cluster tileauto starts: idle compile workers kept for the next tuning
# (docs/scale.md, "Warm workers")
LOCAL_SYSTEM_CONFIG = {"idle_worker_killing_time_threshold_ms": 600_000}
# how long a timing waits for every CPU of its node (other work holding some: a compile, another
# tenant's actor); then it times without them, with a warning (docs/scale.md, "Waits that end")
HOLD_WAIT_S = 60.0
_WARNED_ADDRESSES: set[tuple[str, str]] = set()  # (address asked for, Ray joined) warned of


class NodeLost(WorkerError):
    """The node running a job died: the job is not the config's fault (it is run again)."""


class RayNodeLostError(TileautoError):
    """The Ray node of this process died (its raylet, or an agent it fate-shares with).

    Nothing runs on that Ray any more. A tuning goes on with local workers (``tune()``); the
    next Ray tuning of the process starts a new local Ray.
    """


def import_ray() -> Any:
    """The ``ray`` module, or a clear error naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise TileautoError(
            f"executor='ray' needs Ray, which is not installed: {RAY_EXTRA}"
        ) from exc
    return ray


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
        self._short: set[str] = set()  # nodes timed without all their CPUs (warned once)
        self.probed: dict[str, dict[str, Any]] = {}  # node -> its hardware probe's answer

    def connect(self) -> Any:
        """Join (or start) the cluster once; the ``ray`` module."""
        ray = import_ray()
        with self._lock:
            local = self.address in (None, "local") and not os.environ.get("RAY_ADDRESS")
            if local and not self._joined and ray.is_initialized():
                if self.own_node_lost(ask_gcs=True):
                    ray.shutdown()  # a Ray whose node died runs nothing again: start a new one
            if not self._joined and ray.is_initialized():
                self._warn_other_address(ray)
            self._joined = True
            if not ray.is_initialized():
                kwargs = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
                address, source = self.address, self.source
                from_env = address is None and bool(os.environ.get("RAY_ADDRESS"))
                if from_env:
                    address, source = os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
                if address in (None, "local"):
                    # a cluster of its own even where `ray start` runs one here: Ray would
                    # join that one for address=None and refuse these settings
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

    def _warn_other_address(self, ray: Any) -> None:
        """Warn (once per pair) that this process already joined a Ray other than the
        ``address`` asked for: Ray joins one cluster per process, so that one is used."""
        if self.address in (None, "local", "auto"):
            return
        try:
            joined = ray.get_runtime_context().gcs_address
        except Exception:  # noqa: BLE001 - not known: nothing to compare with
            return
        if _same_address(self.address, joined) or (self.address, joined) in _WARNED_ADDRESSES:
            return
        _WARNED_ADDRESSES.add((self.address, joined))
        message = (
            f"{self.source}={self.address!r} is not used: this process already joined the "
            f"Ray cluster at {joined} (an earlier ray.init()), and Ray joins one cluster per "
            f"process, so the tuning runs there. Call ray.shutdown() first to tune on "
            f"{self.address}, or unset {self.source}"
        )
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        log.warning("%s", message)

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
            f"out of memory ({logs}/raylet.err says which)"
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
    def hold_cores(self, node_id: str, wait_s: float | None = None) -> None:
        """Hold every CPU of ``node_id`` (waits for the compiles running there to end); the
        nodes held already stay held (several run actors time at once, one per node).

        The hold is a placement group pinned by the node's ``ray.io/node-id`` label (no
        process); on a Ray without node labels, an actor with the node's CPUs.

        Other work may hold some of the node's CPUs for good (another tenant's actor): after
        ``wait_s`` (default :data:`HOLD_WAIT_S`) this returns without them, with a warning
        (once per node), and the hold stays asked for: it takes the CPUs once they are free.
        Until :meth:`release_cores`, the node's next timings do not wait again.

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
        wait_s = HOLD_WAIT_S if wait_s is None else wait_s
        try:
            held = self._wait_hold(ray, hold, node_id, time.monotonic() + wait_s)
        except BaseException as exc:
            hold.release()
            if isinstance(exc, ray.exceptions.RayError):
                raise NodeLost(
                    f"node {node_id[:12]} was lost while its cores were reserved"
                ) from exc
            raise
        with self._lock:
            self._holds[node_id] = hold
        if not held:
            self._warn_short(ray, node_id, cpus, wait_s)

    def _wait_hold(self, ray: Any, hold: _Hold, node_id: str, deadline: float) -> bool:
        """Whether the hold got its CPUs before ``deadline``."""
        while True:
            left = max(0.0, min(1.0, deadline - time.monotonic()))
            if ray.wait([hold.ready], timeout=left)[0]:
                ray.get(hold.ready)
                return True
            if not self.node_alive(node_id):
                raise NodeLost(f"node {node_id[:12]} was lost while its cores were reserved")
            if time.monotonic() >= deadline:
                return False

    def _warn_short(self, ray: Any, node_id: str, cpus: float, wait_s: float) -> None:
        """Say, once per node, that its timings run while other work holds some of its CPUs."""
        with self._lock:
            if node_id in self._short:
                return
            self._short.add(node_id)
        free = _free_cpus(ray, node_id)
        held = "some" if free is None else f"{cpus - free:g}"
        message = (
            f"timing on Ray node {node_id[:12]} without holding its CPUs: other work (not "
            f"this tuning's timings) held {held} of its {cpus:g} CPUs for {wait_s:g} s. The "
            "timings taken meanwhile share the node with that work and may be slower or "
            "noisier than on an idle node; the node's CPUs are taken once they are free"
        )
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        log.warning("%s", message)

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


def _free_cpus(ray: Any, node_id: str) -> float | None:
    """The CPUs free on a node now (None where Ray does not say: an internal API)."""
    try:
        from ray._private.state import available_resources_per_node

        return float(available_resources_per_node().get(node_id, {}).get("CPU", 0.0))
    except Exception:  # noqa: BLE001 - Ray's private layout: the warning goes without it
        return None


def _same_address(asked: str, joined: str) -> bool:
    """Whether ``host:port`` ``asked`` names the GCS at ``joined`` (host names resolved)."""

    def norm(address: str) -> tuple[str, str]:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        try:
            host = socket.gethostbyname(host)
        except OSError:
            pass
        return host, port

    return norm(asked) == norm(joined)


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
        actor_class(ray, _CoreHold)
        .options(num_cpus=cpus, scheduling_strategy=on_node(ray, node_id), max_restarts=0)
        .remote()
    )

    def release() -> None:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - its node may be gone already
            pass

    return _Hold(actor.ready.remote(), release)


def on_node(ray: Any, node_id: str, *, soft: bool = False) -> Any:
    """On that node (``soft``: or anywhere once it is gone)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


_CLASSES: dict[tuple[int, type], Any] = {}


def actor_class(ray: Any, cls: type) -> Any:
    key = (id(ray), cls)
    if key not in _CLASSES:
        _CLASSES[key] = ray.remote(cls)
    return _CLASSES[key]
