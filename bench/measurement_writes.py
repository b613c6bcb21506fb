"""What the tuning cache costs a budgeted tuning of a large space: its measurement files.

``@autotune(configs=product(...), max_trials=4)`` over 9,000 configs of the example
elementwise kernel (``silu_mul``, with two parameters the kernel ignores), each run in a fresh
process with an empty cache: once with the tuning cache on, once with it off
(``TILEAUTO_AUTO_TUNING_DISABLE_CACHE=1``). Printed: the wall time of the tuning call, the
trials measured, and the measurement files the run left (one per measured trial is the
expectation; a file per config of the space was the cost this bench was written for).

    python bench/measurement_writes.py
    python bench/measurement_writes.py --source /path/to/other/tileauto/checkout   # compare
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
source = {source!r}
if source:  # that checkout's tileauto instead of the installed (editable) one
    sys.meta_path[:] = [f for f in sys.meta_path if "Redirecting" not in type(f).__name__]
    sys.path[:] = [p for p in sys.path if p not in ({root!r}, "")]
    sys.path.insert(0, source)
sys.path.insert(0, {examples!r})
import elementwise_cpu
import tileauto
from tileauto.space import product

def kernel(M, N, vec=8, block=4096, unroll=1, a=0, b=0):
    return elementwise_cpu.silu_mul(M, N, vec=vec, block=block, unroll=unroll)

space = product(vec=[1, 2, 4, 8, 16], a=list(range(30)), b=list(range(60)))
tuned = tileauto.autotune(
    configs=space, max_trials=4, warmup=1, rep=2, verbose=False, retime_top_k=0
)(tileauto.jit(out_idx=[-1], target="llvm")(kernel))
start = time.perf_counter()
tuned(64, 256)
wall = time.perf_counter() - start
result = tuned.get_tuner_result(64, 256)
measured = sum(t.status.value != "not_run" for t in result.trials)
print(json.dumps({{"configs": len(space), "wall_s": wall, "measured": measured,
                  "tileauto": tileauto.__file__}}))
"""


def run(cache_on: bool, source: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TILEAUTO_CACHE_DIR": cache}
        if not cache_on:
            env["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
        code = CHILD.format(examples=str(ROOT / "examples"), source=source, root=str(ROOT))
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise SystemExit(f"run failed:\n{out.stderr[-3000:]}")
        got = json.loads(out.stdout.strip().splitlines()[-1])
        got["files"] = len(list(Path(cache, "measurements").glob("*/*.json")))
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="", help="a tileauto checkout to run instead")
    args = parser.parse_args(argv)
    source = str(Path(args.source).resolve()) if args.source else ""
    rows = [("on", run(True, source)), ("off", run(False, source))]
    print(f"tileauto: {rows[0][1]['tileauto']}; {rows[0][1]['configs']:,} configs, max_trials=4")
    print(f"{'tuning cache':<13} {'tuning wall s':>14} {'measured':>9} {'files':>7}")
    for name, got in rows:
        print(f"{name:<13} {got['wall_s']:>14.2f} {got['measured']:>9} {got['files']:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
