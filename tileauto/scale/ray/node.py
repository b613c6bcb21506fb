"""What a Ray node runs for tileauto before it compiles or times anything: its hardware probe.

A Ray worker imports the module of the function it runs. This one imports neither torch nor
TVM, so a probe answers in the time a worker process starts and leaves the node's CPUs to the
compiles that start at the same moment.
"""

from __future__ import annotations

import sys
from typing import Any


def local_hardware(device: str) -> dict[str, Any]:
    """What identifies this machine's hardware for ``device`` (two nodes may share timings
    only when this is equal).

    A CPU: a hash of its model and flags, and the TVM version (together they fix what LLVM
    makes of the CPU, the cache key's device fingerprint), read without the compiler; where
    the model cannot be read, the device fingerprint itself. A GPU: the device fingerprint
    (name, compute capability, SM count, CUDA version).
    """
    from tileauto.jit.target_memo import device_fingerprint, host_identity

    if device == "cpu":
        from tileauto.cache.key import tvm_version

        cpu = host_identity()
        if cpu is not None:
            return {"cpu": cpu, "tvm": tvm_version()}
    return {"device": device_fingerprint(device)}


def use_path(path: list[str]) -> None:
    """The driver's import path, so the factory's module imports on the node as it does here."""
    for entry in reversed(path):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def probe(device: str, path: list[str]) -> dict[str, Any]:
    """On a node (a Ray task): which node, its hardware and its memory (bytes)."""
    use_path(path)
    import psutil
    import ray

    return {
        "node": ray.get_runtime_context().get_node_id(),
        "hardware": local_hardware(device),
        "memory": psutil.virtual_memory().total,
    }
