"""How long tuning takes, against its floor and against one compile worker, in one run.

    python bench/tune_time.py [--size 512] [--warmup 25] [--rep 100]

Tunes the 16-config CPU GEMM space of ``examples/gemm_cpu.py`` (tuning cache off) and prints:

- wall: the whole tuning run (compile, validate, time, report);
- floor: sum of compile times / workers + sum of run times (what a perfect scheduler with
  the same workers would need);
- wall / floor, for a cold process (worker processes start during the run) and a warm one
  (every tuning after the first in a process: forkserver workers are already up, forked ones
  are forked again);
- the cold process twice: as tileauto does it (workers forked from this process) and, in a
  fresh process started right after, with ``TILEAUTO_WORKER_START=forkserver`` (workers start
  from a new interpreter that imports TVM and torch);
- the compile phase with 2 workers against 1 worker (speedup), measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
os.environ["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
os.environ["TILEAUTO_DISABLE_CACHE"] = "1"

import gemm_cpu  # noqa: E402

from tileauto.options import ProfileArgs  # noqa: E402
from tileauto.settings import Settings  # noqa: E402
from tileauto.tuner import Tuner, TuningProblem  # noqa: E402


def tune_once(size: int, workers: int, warmup: int, rep: int) -> dict[str, float]:
    os.environ["TILEAUTO_AUTO_TUNING_CPU_COUNTS"] = str(workers)
    settings = Settings.from_env()
    space = gemm_cpu.configs(size, size, size)
    problem = TuningProblem(
        factory=gemm_cpu.gemm,
        args=(size, size, size),
        kwargs={},
        configs=space,
        compile_args=gemm_cpu.matmul.compile_args,
        profile_args=ProfileArgs(warmup=warmup, rep=rep, skip_check=False),
        settings=settings,
        verbose=False,
        name="gemm",
    )
    start = time.perf_counter()
    outcome = Tuner(problem).run()
    wall = time.perf_counter() - start
    trials = list(outcome.trials)
    if outcome.default_trial.index < 0:
        trials.append(outcome.default_trial)
    compile_sum = sum(t.compile_s or 0.0 for t in trials)
    run_sum = sum(t.run_s or 0.0 for t in trials)
    floor = compile_sum / outcome.workers + run_sum
    return {
        "wall": wall,
        "floor": floor,
        "compile_sum": compile_sum,
        "run_sum": run_sum,
        "compile_wall": outcome.compile_wall_s,
        "configs": len(space),
        "passed": sum(t.ok for t in outcome.trials),
        "best_ms": outcome.best.latency_ms or float("nan"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--rep", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved 1- and 2-worker runs")
    parser.add_argument("--cold-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = ["--size", str(args.size), "--warmup", str(args.warmup), "--rep", str(args.rep)]
    if args.cold_json:  # one cold tuning in this fresh process, as JSON (see below)
        print(json.dumps(tune_once(args.size, 2, args.warmup, args.rep)))
        return 0
    # cold first, then 1 and 2 workers interleaved (this machine is shared: best of each)
    cold = tune_once(args.size, 2, args.warmup, args.rep)
    served = subprocess.run(
        [sys.executable, __file__, "--cold-json", *sizes],
        env={**os.environ, "TILEAUTO_WORKER_START": "forkserver"},
        capture_output=True,
        text=True,
        check=True,
    )
    cold_served = json.loads(served.stdout.strip().splitlines()[-1])
    samples: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for workers in (1, 2):
            samples[workers].append(tune_once(args.size, workers, args.warmup, args.rep))
    best = {w: min(rs, key=lambda r: r["wall"]) for w, rs in samples.items()}
    rows = [
        ("2 workers, cold process", 2, cold),
        ("  the same, forkserver", 2, cold_served),
        ("2 workers, warm process (best)", 2, best[2]),
        ("1 worker, warm process (best)", 1, best[1]),
    ]
    print(
        f"\ntune time: GEMM {args.size}^3, {rows[0][2]['configs']} configs, warmup {args.warmup}, rep {args.rep}"
    )
    header = f"{'run':<30} {'wall s':>7} {'floor s':>8} {'wall/floor':>10} {'compile s':>10} {'run s':>6} {'compile phase s':>16} {'best ms':>8}"
    print(header)
    print("-" * len(header))
    for label, _, r in rows:
        print(
            f"{label:<30} {r['wall']:7.2f} {r['floor']:8.2f} {r['wall'] / r['floor']:10.2f} "
            f"{r['compile_sum']:10.2f} {r['run_sum']:6.2f} {r['compile_wall']:16.2f} {r['best_ms']:8.4f}"
        )
    two = min(r["compile_wall"] for r in samples[2])
    one = min(r["compile_wall"] for r in samples[1])
    print(f"\ncompile phase, 1 worker / 2 workers: {one:.2f} s / {two:.2f} s = {one / two:.2f}x")
    warm1, warm2 = best[1], best[2]
    print(
        f"whole tuning, 1 worker / 2 workers (warm): {warm1['wall']:.2f} s / {warm2['wall']:.2f} s = {warm1['wall'] / warm2['wall']:.2f}x"
    )
    print(
        f"cold process, forkserver / forked workers: {cold_served['wall']:.2f} s / {cold['wall']:.2f} s = {cold_served['wall'] / cold['wall']:.2f}x "
        f"(wall / floor {cold_served['wall'] / cold_served['floor']:.2f} with the forkserver)"
    )
    print(
        f"wall / floor: cold {cold['wall'] / cold['floor']:.2f}, warm {warm2['wall'] / warm2['floor']:.2f} (target <= 1.25)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
