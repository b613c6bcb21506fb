"""The Ray stages: a builder of Ray tasks and a runner of Ray actors, with node loss handled.

cluster.py   RayCluster: joining (or starting) Ray, holding a timing node's cores
nodes.py     which nodes fit a tuning: the target's hardware, the tuning's modules
node.py      what a Ray node runs before anything else: its hardware probe (no torch, no TVM)
_files.py    what travels to a node: the driver's settings, kernel folders as bytes
build.py     RayBuilder: compiles as Ray tasks, resubmitted when their node is lost
actor.py     RayWorker: the run worker as a Ray actor, with its memory watcher
run.py       RayRunner: timing in run actors, one lane per matching node (or GPU)

The names below load on first use: a Ray worker that imports :mod:`.node` to probe its
hardware must not import torch and TVM with them. What runs where: docs/scale.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "LOCAL_SYSTEM_CONFIG": "tileauto.scale.ray.cluster",
    "NodeLost": "tileauto.scale.ray.cluster",
    "RayCluster": "tileauto.scale.ray.cluster",
    "RayNodeLostError": "tileauto.scale.ray.cluster",
    "import_ray": "tileauto.scale.ray.cluster",
    "NoMatchingNodeError": "tileauto.scale.ray.nodes",
    "RayBuilder": "tileauto.scale.ray.build",
    "ClusterBusyError": "tileauto.scale.ray.build",
    "RayWorker": "tileauto.scale.ray.actor",
    "RayRunner": "tileauto.scale.ray.run",
}

if TYPE_CHECKING:
    from tileauto.scale.ray.actor import RayWorker
    from tileauto.scale.ray.build import ClusterBusyError, RayBuilder
    from tileauto.scale.ray.cluster import (
        LOCAL_SYSTEM_CONFIG,
        NodeLost,
        RayCluster,
        RayNodeLostError,
        import_ray,
    )
    from tileauto.scale.ray.nodes import NoMatchingNodeError
    from tileauto.scale.ray.run import RayRunner


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tileauto.scale.ray' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "LOCAL_SYSTEM_CONFIG",
    "ClusterBusyError",
    "NoMatchingNodeError",
    "NodeLost",
    "RayBuilder",
    "RayCluster",
    "RayNodeLostError",
    "RayRunner",
    "RayWorker",
    "import_ray",
]
