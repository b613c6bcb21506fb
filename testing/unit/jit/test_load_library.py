"""Loading a kernel library: a file replaced at a path this process loaded before, and a
library exported under a name that does not end in ``.so``, load what the file holds.

``dlopen`` gives back the library it already has for a path, and TVM picks its loader by the
file's suffix: both are loaded through a fresh ``.so`` name (``runtime._load_name``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import kernels
import pytest
import torch

import tileauto
from tileauto import JITKernel

scale_shift = tileauto.jit(out_idx=[1, 2], target="llvm")(kernels.scale_shift)


def _scaled(kernel: JITKernel) -> float:
    b, _ = kernel(torch.ones(2, 3))
    return float(b[0, 0])


def test_a_library_exported_again_to_a_loaded_path_loads_its_new_code(tmp_path):
    path = tmp_path / "k.so"
    scale_shift(2, 3, scale=2.0).export_library(path)
    assert _scaled(JITKernel.load_library(path)) == 2.0
    scale_shift(2, 3, scale=5.0).export_library(path)  # replaced: a new file at the path
    assert _scaled(JITKernel.load_library(path)) == 5.0  # the old library's 2.0 before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.so", "k.so.json"]


@pytest.mark.parametrize("name", ["kernel", "kernel.tar", "kernel.o", "kernel.lib"])
def test_a_library_exported_under_any_name_loads(tmp_path, name):
    path = tmp_path / name
    scale_shift(2, 3, scale=3.0).export_library(path)
    assert _scaled(JITKernel.load_library(path)) == 3.0


def test_loading_through_a_fresh_name_leaves_no_file_behind(tmp_path):
    temp = Path(tempfile.gettempdir())
    before = {p.name for p in temp.iterdir()}
    path = tmp_path / "kernel"
    scale_shift(2, 3, scale=4.0).export_library(path)
    assert _scaled(JITKernel.load_library(path)) == 4.0
    after = {p.name for p in temp.iterdir()}
    assert not [n for n in after - before if n.startswith("tileauto-load-")]
