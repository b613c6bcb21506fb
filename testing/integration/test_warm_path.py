"""The warm path of a decorated factory, in fresh processes: what its key costs.

A process that finds its tuned kernel in the cache builds the tuning key, and the key names
installed code by distribution and version and user code by its normalized source. Both are
remembered on disk by the process that tuned (``installed/``, ``sources/``), so a warm process
neither scans the installed distributions nor parses a source file: here both are made to
fail the process if they are called. The kernel reaches torch through its reference program.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)

KERNELS = """
import torch

import tileauto
import tileauto.language as T

N = 2048


def reference(A):
    return torch.mul(A, 2)


def double(n: int, block: int = 128):
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in T.serial(n // block):
            for j in T.serial(block):
                B[i * block + j] = A[i * block + j] * T.float32(2)

    return main


tuned = tileauto.autotune(
    configs=[{"block": 64}, {"block": 256}], warmup=1, rep=3, ref_prog=reference, verbose=False
)(tileauto.jit(out_idx=[-1], target="llvm")(double))
"""

CALL = """
import importlib.metadata, json, sys
import torch
if {warm!r}:
    def refuse(what):
        def fail(*args, **kwargs):
            raise SystemExit(f"the warm path called {{what}}")
        return fail
    importlib.metadata.packages_distributions = refuse("packages_distributions()")
    import tileauto.cache._code as code
    code._parsed_dump = refuse("the parser of a source file")
import kernels
from tileauto.jit import compiler
kernel = kernels.tuned(kernels.N)
a = torch.rand(kernels.N)
result = kernels.tuned.get_tuner_result(kernels.N)
print("REPORT " + json.dumps({{
    "ok": bool(torch.allclose(kernel(a), 2 * a)),
    "hit": result.cache_hit,
    "compiles": compiler.COMPILES.count,
    "compiler": "tvm" in sys.modules,
}}))
"""


def run(folder: Path, cache: Path, warm: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEAUTO_")}
    env["TILEAUTO_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(folder)])
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CALL.format(warm=warm))],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])


def test_a_warm_process_neither_scans_distributions_nor_parses_sources(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    cache = tmp_path / "cache"
    cold = run(tmp_path, cache, warm=False)
    assert cold["ok"] and not cold["hit"]
    assert any((cache / "installed").iterdir()) and any((cache / "sources").iterdir())
    warm = run(tmp_path, cache, warm=True)
    assert warm == {"ok": True, "hit": True, "compiles": 0, "compiler": False}


def test_without_the_memos_a_warm_process_works_them_out_once(tmp_path):
    import shutil

    (tmp_path / "kernels.py").write_text(KERNELS)
    cache = tmp_path / "cache"
    run(tmp_path, cache, warm=False)
    shutil.rmtree(cache / "installed")
    shutil.rmtree(cache / "sources")
    again = run(tmp_path, cache, warm=False)  # a hit: the same key, worked out the slow way
    assert again["ok"] and again["hit"] and again["compiles"] == 0
    assert run(tmp_path, cache, warm=True)["hit"]  # and remembered for the next one
