"""Start-up and memory of tuning a space of a million configs: a lazy product against a list.

``@autotune(configs=space, max_trials=8)`` on the example elementwise kernel (``silu_mul``,
with three extra parameters the kernel ignores, so that the product is six parameters of ten
values: 10^6 combinations, three expression constraints). The same configs are tuned twice,
each in a fresh process, side by side:

- ``product``: ``configs=product(...)``, kept lazy: decoded by index as the search asks;
- ``list``: ``configs=list(product(...))``, the list of dicts a TileLang user would write.

Both measure the same 8 configs (the guided search's first random batch, same seed), so the
difference in wall time and peak memory is the cost of the space itself. Printed: the valid
configs, the wall time of the tuning call, the growth of the peak resident memory during the
call, the wall time of the same call in a second process (a cache hit: the space is resolved
and keyed, the entry read, nothing tuned), and the ratios list / product.

    python bench/lazy_space.py            # 10^6 combinations
    python bench/lazy_space.py --values 6 # 6^6 = 46,656 (quick)
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
import json, resource, sys, time
sys.path.insert(0, {examples!r})
import elementwise_cpu
import tileauto
from tileauto.space import product

def kernel(M, N, vec=8, block=4096, unroll=1, a=0, b=0, c=0):
    return elementwise_cpu.silu_mul(M, N, vec=vec, block=block, unroll=unroll)

n = {values}
space = product(
    vec=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512][:n],
    block=[1024 * (k + 1) for k in range(n)],
    unroll=list(range(1, n + 1)),
    a=list(range(n)), b=list(range(n)), c=list(range(n)),
    constraints=["block % (vec * unroll) == 0", "a + b <= c + 6", "vec * unroll <= 256"],
)
configs = space if {mode!r} == "product" else list(space)
tuned = tileauto.autotune(
    configs=configs, max_trials=8, warmup=1, rep=2, verbose=False, retime_top_k=0
)(tileauto.jit(out_idx=[-1], target="llvm")(kernel))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
tuned(64, 256)
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = tuned.get_tuner_result(64, 256)
measured = sum(t.status.value != "not_run" for t in result.trials)
print(json.dumps({{"valid": len(space), "product": space.product_size, "wall_s": wall,
                  "peak_growth_mib": (peak - before) / 1024, "measured": measured,
                  "hit": result.cache_hit}}))
"""


def run(mode: str, values: int) -> dict:
    """The tuning in a fresh process, then the same call in another (a cache hit)."""
    got = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TILEAUTO_CACHE_DIR": cache}
        code = CHILD.format(examples=str(ROOT / "examples"), values=values, mode=mode)
        for _ in range(2):
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
            )
            if out.returncode != 0:
                raise SystemExit(f"{mode} run failed:\n{out.stderr[-3000:]}")
            got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    tuned, hit = got
    if tuned["hit"] or not hit["hit"]:
        raise SystemExit(f"{mode}: expected a tuning then a cache hit, got {got}")
    return {**tuned, "hit_s": hit["wall_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=10, help="values per parameter (<= 10)")
    parser.add_argument("--skip-list", action="store_true", help="time the lazy product only")
    args = parser.parse_args(argv)
    if not 2 <= args.values <= 10:
        parser.error(f"--values must be in 2..10, got {args.values}")
    lazy = run("product", args.values)
    listed = None if args.skip_list else run("list", args.values)
    print(
        f"space: {lazy['product']:,} combinations, {lazy['valid']:,} valid configs; "
        f"8 configs measured (max_trials=8)"
    )
    print(
        f"{'configs=':<10} {'tuning wall s':>14} {'peak growth MiB':>16} {'measured':>9} "
        f"{'cache hit s':>12}"
    )
    for name, got in (("product", lazy), ("list", listed)):
        if got is not None:
            print(
                f"{name:<10} {got['wall_s']:>14.2f} {got['peak_growth_mib']:>16.1f} "
                f"{got['measured']:>9} {got['hit_s']:>12.2f}"
            )
    if listed is not None:
        print(
            f"list / product: wall {listed['wall_s'] / lazy['wall_s']:.1f}x, peak growth "
            f"{listed['peak_growth_mib'] / max(lazy['peak_growth_mib'], 0.1):.1f}x, cache hit "
            f"{listed['hit_s'] / lazy['hit_s']:.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
