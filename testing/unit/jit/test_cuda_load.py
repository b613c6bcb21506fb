"""A CUDA kernel built where no GPU was, loaded elsewhere in a process that has not imported TVM.

Such a library holds CUDA C (``data/README.md``): TVM's runtime compiles it at load through a
callback that only ``import tvm`` registers, so the loader must import TVM for it on a GPU
machine, and without a GPU the kernel loads and says, when called, that it needs one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

LIBRARY = Path(__file__).parent / "data" / "cuda_c_double.so"


def _in_fresh_process(body: str) -> dict:
    """Run ``body`` in a new interpreter (TVM not imported) and return the JSON it prints last."""
    code = f"import json, sys\nfrom tileauto import JITKernel\nlib = {str(LIBRARY)!r}\n"
    code += textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=LIBRARY.parent,  # not the checkout: the installed tileauto
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_fixture_holds_cuda_c():
    data = LIBRARY.read_bytes()
    assert b"__global__" in data and b"_vadd_cuda_kernel" in data


@pytest.mark.skipif(torch.cuda.is_available(), reason="the behaviour where no GPU is")
def test_a_cuda_c_kernel_loads_where_no_gpu_is_and_says_so_when_called():
    out = _in_fresh_process(
        """
        k = JITKernel.load_library(lib)
        try:
            k(__import__("torch").zeros(4096))
            said = "ran"
        except Exception as exc:
            said = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"said": said, "tvm": "tvm" in sys.modules}))
        """
    )
    assert out["said"].startswith("TileautoError: kernel _vadd_cuda was compiled for CUDA")
    assert "needs a GPU" in out["said"]
    assert not out["tvm"]  # no GPU, so nothing to compile: the compiler stays out


@pytest.mark.gpu
def test_a_cuda_c_kernel_built_without_a_gpu_runs_on_the_gpu():
    out = _in_fresh_process(
        """
        import torch
        k = JITKernel.load_library(lib)
        a = torch.randn(4096, device="cuda")
        b = k(a)
        print(json.dumps({"err": (b - 2 * a).abs().max().item(), "tvm": "tvm" in sys.modules}))
        """
    )
    assert out["err"] == 0.0
    assert out["tvm"]  # the CUDA C was compiled at load, through TVM's callback
