"""Start-up of a process that uses a tuned kernel, against ``import torch`` (for warm_start.py).

A process that only uses tuned kernels should pay for torch (it calls the kernel with torch
tensors anyway) and for TVM's runtime, not for TVM's compiler. Fresh processes, timed from
start to exit, interleaved round by round:

- ``python -c "import torch"``: the floor a torch user pays anyway;
- ``python -c "import tileauto"``;
- ``tileauto --help`` (the console script's two lines: ``from tileauto.cli import main``,
  ``main()``);
- a warm process: import, a cache hit of the GEMM space, the first call, exit (no check);
- the library load: inside a process that has imported torch, ``import tvm_ffi``, TVM's
  runtime library and the kernel's ``.so`` (what a warm process needs on top of torch).

Each with bytecode caches on (a private ``PYTHONPYCACHEPREFIX``, filled by an untimed run)
and off (``PYTHONDONTWRITEBYTECODE=1`` and an empty prefix each time, so that nothing,
torch included, is read from a ``.pyc``), for this tree and, side by side when one is given,
for a baseline tree (a copy of ``tileauto/`` and ``examples/`` from before the start-up work),
whose figures the ratios are against; without one, the ratios are against the figures of
issue 13 (made on a loaded machine without bytecode caches: import torch 5.9 s, import
tileauto 9.2 s, warm process 8.3 s; ``tileauto --help`` about 3 s), taken relative to its
import-torch floor. Targets: warm process <= 1.15 x the import-torch floor + the library
load; ``tileauto --help`` <= 0.3 s.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Issue 13's figures (bytecode caches off, loaded machine), for runs without a baseline tree.
ISSUE_TORCH_S, ISSUE_S = 5.9, {"import tileauto": 9.2, "warm process": 8.3, "tileauto --help": 3.0}
WARM_RATIO, HELP_S = 1.15, 0.3
KINDS = ("import tileauto", "tileauto --help", "warm process")

# Makes a baseline tree win over the editable install's import hook (which outranks sys.path).
_PRELUDE = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if 'Redirect' not in type(f).__name__]; sys.path.insert(0, {tree!r})\n"
)
_CODE = {
    "import torch": "import torch\n",
    "import tileauto": "import tileauto\n",
    "tileauto --help": "from tileauto.cli import main\nmain(['--help'])\n",
    "warm process": (
        "import sys\nsys.path.insert(0, {examples!r})\n"
        "import torch, tileauto, gemm_cpu\n"
        "tuned = tileauto.autotune(configs=gemm_cpu.configs, verbose=False)(gemm_cpu.matmul)\n"
        "kernel = tuned({n}, {n}, {n})\n"
        "kernel(torch.rand({n}, {n}), torch.rand({n}, {n}))\n"
        "assert tuned.get_tuner_result({n}, {n}, {n}).cache_hit or {cold}\n"
    ),
    "library load": (
        "import ctypes, importlib.util, time\n"
        "from pathlib import Path\n"
        "import torch\n"
        "start = time.perf_counter()\n"
        "import tvm_ffi\n"
        "lib = Path(importlib.util.find_spec('tvm').submodule_search_locations[0]) / 'lib'\n"
        "ctypes.CDLL(str(lib / 'libtvm_runtime.so'), ctypes.RTLD_GLOBAL)\n"
        "tvm_ffi.load_module({so!r})\n"
        "print('LOAD', time.perf_counter() - start)\n"
    ),
}


class Tree:
    """A tileauto source tree to measure: this checkout, or a copy of it from before."""

    def __init__(self, name: str, root: Path, cache: Path, prelude: str) -> None:
        self.name, self.root, self.cache, self.prelude = name, root, cache, prelude

    def code(self, kind: str, size: int, cold: bool = False, so: str = "") -> str:
        body = _CODE[kind].format(examples=str(self.root / "examples"), n=size, cold=cold, so=so)
        return self.prelude + body


def _env(cache: Path, bytecode: bool, pyc: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TILEAUTO_", "PYTHON"))}
    env.pop("TVM_NUM_THREADS", None)
    env["TILEAUTO_CACHE_DIR"] = str(cache)
    env["PYTHONPYCACHEPREFIX"] = str(pyc)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def timed(code: str, env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Wall seconds from start to exit of ``python -c code``, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=900
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"start-up child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout


def measure(size: int, rounds: int, baseline: Path | None) -> dict:
    """Median wall times per (tree, bytecode, kind), and the library load."""
    base = Path(tempfile.mkdtemp(prefix="tileauto-startup-"))
    try:
        trees = [
            Tree(
                "now", ROOT, base / "cache-now", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            )
        ]
        if baseline is not None:
            tree = Path(baseline).resolve()
            trees.append(
                Tree("before", tree, base / "cache-before", _PRELUDE.format(tree=str(tree)))
            )
        scratch = base / "scratch"
        scratch.mkdir()
        for tree in trees:  # cold: tune once; on: fill the bytecode cache
            env = _env(tree.cache, True, base / f"pyc-{tree.name}")
            timed(tree.code("warm process", size, cold=True), env, scratch)
            for kind in ("import torch", *KINDS):
                timed(tree.code(kind, size), env, scratch)
        so = str(next((base / "cache-now" / "autotuner").glob("*/kernel/kernel.so")))
        times: dict[tuple[str, str, str], list[float]] = {}
        loads: list[float] = []
        for r in range(rounds):
            for bytecode in (True, False) if r % 2 == 0 else (False, True):
                mode = "on" if bytecode else "off"
                for tree in trees if r % 2 == 0 else trees[::-1]:
                    for kind in ("import torch", *KINDS) if tree is trees[0] else KINDS:
                        pyc = (
                            base / f"pyc-{tree.name}"
                            if bytecode
                            else Path(tempfile.mkdtemp(dir=base))
                        )
                        wall, _ = timed(
                            tree.code(kind, size), _env(tree.cache, bytecode, pyc), scratch
                        )
                        times.setdefault((tree.name, mode, kind), []).append(wall)
                        if not bytecode:
                            shutil.rmtree(pyc, ignore_errors=True)
            _, out = timed(
                trees[0].code("library load", size, so=so),
                _env(base, True, base / "pyc-now"),
                scratch,
            )
            loads.append(float(out.split("LOAD")[-1]))
        return {
            "trees": [t.name for t in trees],
            "median": {k: statistics.median(v) for k, v in times.items()},
            "load_s": statistics.median(loads),
            "rounds": rounds,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def report(res: dict) -> tuple[list[str], dict]:
    """Lines to print, and the figures (with verdicts) for a JSON report.

    Each time is compared with the baseline tree's, when there is one, else with issue 13's
    figure scaled by the import-torch floors (its floor against this run's, bytecode off).
    """
    med, load = res["median"], res["load_s"]
    before = "before" in res["trees"]
    against = (
        "the baseline tree" if before else "issue 13's figures, scaled by the import-torch floor"
    )
    lines = [
        f"start-up: fresh processes, wall time to exit, median of {res['rounds']} interleaved "
        f"rounds; before = {against}"
    ]
    figures: dict = {"load_s": load}
    for mode in ("on", "off"):
        floor = med[("now", mode, "import torch")]
        row = [f'  bytecode {mode}: python -c "import torch" {floor:.2f} s']
        for kind in KINDS:
            now = med[("now", mode, kind)]
            if before:
                was = med[("before", mode, kind)]
            else:
                was = ISSUE_S[kind] * (floor / ISSUE_TORCH_S if kind != "tileauto --help" else 1)
            row.append(f"{kind} {now:.3f} s (before {was:.2f} s: {was / now:.1f}x faster)")
            figures[f"{kind} {mode}"] = now
            figures[f"{kind} before {mode}"] = was
        lines.append("; ".join(row))
        warm = med[("now", mode, "warm process")]
        limit = WARM_RATIO * floor + load
        ok_warm = warm <= limit
        help_s = med[("now", mode, "tileauto --help")]
        ok_help = help_s <= HELP_S
        lines.append(
            f"  bytecode {mode}: warm process / import torch {warm / floor:.2f}; target warm <= "
            f"{WARM_RATIO} x import torch + library load {load:.3f} s = {limit:.2f} s: "
            f"{'met' if ok_warm else 'MISSED'}; tileauto --help {help_s:.3f} s (target <= "
            f"{HELP_S} s: {'met' if ok_help else 'MISSED'})"
        )
        figures[f"floor {mode}"] = floor
        figures[f"warm verdict {mode}"] = "met" if ok_warm else "MISSED"
        figures[f"help verdict {mode}"] = "met" if ok_help else "MISSED"
    return lines, figures
