"""Which nodes may run a tuning's jobs: the hardware of the target, the tuning's modules."""

from __future__ import annotations

import sys
from typing import Any

from tileauto._logging import get_logger
from tileauto.errors import TileautoError
from tileauto.scale.ray.cluster import START_TIMEOUT_S, RayCluster, on_node
from tileauto.scale.ray.node import local_hardware, probe

log = get_logger("ray")


class NoMatchingNodeError(TileautoError):
    """No node of the cluster has the hardware of the tuning's target."""


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
        .options(num_cpus=0, max_retries=0, scheduling_strategy=on_node(ray, node))
        .remote(device, list(sys.path))
        for node in nodes
    }
    found: list[str] = []
    others: dict[str, Any] = {}
    for node, ref in refs.items():
        try:
            got = ray.get(ref, timeout=START_TIMEOUT_S)
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


def not_loaded(exc: BaseException, node_ip: str, what: str = "the factory") -> str:
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
