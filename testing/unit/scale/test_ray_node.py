"""The hardware probe a Ray node runs: light (no torch, no TVM) and the driver's answer.

These run without Ray: the probe's module is what a Ray worker imports to run it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tileauto.scale.ray import node as ray_node
from tileauto.scale.ray import nodes as ray_nodes
from tileauto.scale.ray import run as ray_run


def test_a_cpu_probe_imports_neither_torch_nor_tvm():
    """A Ray worker imports the module of the function it runs: the probe's must not pull
    torch or TVM (about a second of CPU per fresh worker, on the cores the compiles need)."""
    script = (
        "import sys\n"
        "from tileauto.scale.ray import node as ray_node\n"
        "print(sorted(ray_node.local_hardware('cpu')))\n"
        "print('torch' in sys.modules, 'tvm' in sys.modules, 'tvm_ffi' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    keys, imported = proc.stdout.strip().splitlines()
    if keys == "['device']":
        pytest.skip("this machine's CPU model cannot be read: the probe uses TVM's fingerprint")
    assert keys == "['cpu', 'tvm']", keys
    assert imported == "False False False", proc.stdout


def test_the_driver_and_a_node_name_the_same_hardware_the_same_way():
    assert ray_nodes.local_hardware is ray_run.local_hardware is ray_node.local_hardware
    assert ray_node.local_hardware("cpu") == ray_node.local_hardware("cpu")
