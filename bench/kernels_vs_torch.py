"""The tuned example kernels against torch's own operator for the same work, side by side.

    python bench/kernels_vs_torch.py [--gemm 256 512 1024] [--rows 1024 4096] [--cols 1024]
                                     [--warmup 5] [--rep 20] [--rounds 12] [--calls 10]
                                     [--json PATH] [--quick]

For each case, tunes the example factory with ``@tileauto.autotune`` (its own config space,
tuning cache off), checks the tuned kernel against torch, then times the tuned kernel and the
torch operator in the same process, interleaved: ``--rounds`` rounds, each timing ``--calls``
calls of one and then of the other (the order rotates every round), after one untimed call
and a pause (``--pause-ms``, 300) so that the other side's thread pool has gone to sleep. The
kernels run on tileauto's thread pool (``tileauto.jit.launcher``: its threads spin 0.2 ms after
a parallel region, then sleep); with ``TILEAUTO_THREAD_POOL=tvm`` on TVM's, whose threads spin
for about 150 ms (300,000 ``sched_yield`` calls, ``TVM_THREAD_POOL_SPIN_COUNT``), which on a
2-core machine takes a core from torch's OpenMP threads and makes a torch op that follows
10-50x slower (unless tileauto found the machine busy when the pool started and turned the
spin off, ``tileauto.jit.thread_pool``: the run says which under its table, and run_all's label says
"spin off"). The pool is in each case's line and in run_all's label. Both sides
allocate their output on every call. Nothing sets ``TVM_NUM_THREADS``: the tuned kernel runs
as in a user's process, with the thread count tileauto tuned it with (``docs/tuning.md``); torch
uses every core (``torch.set_num_threads``).

- GEMM (``examples/gemm_cpu.py``): ``C = A @ B``, M = N = K, against ``torch.matmul`` (MKL);
- softmax (``examples/softmax_cpu.py``): rows of an (M, N) tensor, against ``torch.softmax``;
- RMSNorm (``examples/rmsnorm_cpu.py``): against ``torch.nn.functional.rms_norm``.

Two ratios kernel / torch are printed (below 1: the tuned kernel is faster): of the medians
(the median over rounds of the two sides' median call times in that round) and of the minimums
over all calls. On a machine shared with other jobs a parallel region sometimes waits a whole
scheduler time slice for a core (torch's OpenMP pool more often than TVM's), which moves medians
by milliseconds but not minimums. Both are shown side by side, with the load average before and
after each case, and a case meets its target only when both ratios do.

It also times the mixed use of a model, each op called right after the other one (a torch op
right after the tuned kernel, and the reverse), against the op alone: that is where the
thread pools' spinning shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
CORES = len(os.sched_getaffinity(0))
os.environ["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
os.environ["TILEAUTO_DISABLE_CACHE"] = "1"

import gemm_cpu  # noqa: E402
import rmsnorm_cpu  # noqa: E402
import softmax_cpu  # noqa: E402
import torch  # noqa: E402

import tileauto  # noqa: E402
from tileauto.jit.thread_pool import SPIN_VAR, current_decision  # noqa: E402

TARGETS = {"gemm": 2.0, "softmax": 1.5, "rmsnorm": 1.5}  # kernel / torch, at most


def _time_calls(fn: Callable[[], object], calls: int, before=None) -> list[float]:
    """Milliseconds of each of ``calls`` calls of ``fn``; ``before()`` runs untimed before each."""
    fn()  # untimed: wakes this side's thread pool
    samples = []
    for _ in range(calls):
        if before is not None:
            before()
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


def compare(
    kernel_fn: Callable[[], object],
    torch_fn: Callable[[], object],
    rounds: int,
    calls: int,
    pause_s: float,
) -> dict[str, object]:
    """Interleaved timing of the two sides, and of each right after the other; ms per call."""
    sides = {
        "kernel": lambda: _time_calls(kernel_fn, calls),
        "torch": lambda: _time_calls(torch_fn, calls),
        # the mixed use of a model: one side's op right after the other's
        "torch_after_kernel": lambda: _time_calls(torch_fn, calls, before=kernel_fn),
        "kernel_after_torch": lambda: _time_calls(kernel_fn, calls, before=torch_fn),
    }
    names = list(sides)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            time.sleep(pause_s)  # the other side's spinning pool threads go to sleep
            got = sides[name]()
            samples[name].extend(got)
            per_round[name].append(statistics.median(got))

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(per_round[a], per_round[b]))

    return {
        "ratio_min": min(samples["kernel"]) / min(samples["torch"]),
        "ratio": ratio("kernel", "torch"),
        "kernel_ms": statistics.median(samples["kernel"]),
        "torch_ms": statistics.median(samples["torch"]),
        "kernel_min_ms": min(samples["kernel"]),
        "torch_min_ms": min(samples["torch"]),
        "torch_after_kernel": ratio("torch_after_kernel", "torch"),
        "kernel_after_torch": ratio("kernel_after_torch", "kernel"),
        "per_round_ms": per_round,
    }


def tune(jit_impl, configs, args: tuple, warmup: int, rep: int):
    tuned = tileauto.autotune(configs=configs, warmup_iters=warmup, rep_iters=rep, verbose=False)(
        jit_impl
    )
    start = time.perf_counter()
    kernel = tuned(*args)
    tuning_s = time.perf_counter() - start
    result = tuned.get_tuner_result(*args)
    return kernel, result, tuning_s


def cases(args: argparse.Namespace) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for size in args.gemm:
        out.append({"op": "gemm", "shape": (size, size, size), "label": f"GEMM {size}^3"})
    for rows in args.rows:
        for op in ("softmax", "rmsnorm"):
            name = "softmax" if op == "softmax" else "RMSNorm"
            out.append(
                {"op": op, "shape": (rows, args.cols), "label": f"{name} {rows}x{args.cols}"}
            )
    return out


def run_case(case: dict, args: argparse.Namespace) -> dict[str, object]:
    op, shape = case["op"], case["shape"]
    torch.manual_seed(0)
    if op == "gemm":
        M, N, K = shape
        a, b = torch.randn(M, K), torch.randn(K, N)
        kernel, result, tuning_s = tune(
            gemm_cpu.matmul, gemm_cpu.configs, (M, N, K), args.warmup, args.rep
        )
        torch.testing.assert_close(kernel(a, b), torch.matmul(a, b), rtol=1e-3, atol=1e-4 * K**0.5)

        def kernel_fn():
            return kernel(a, b)

        def torch_fn():
            return torch.matmul(a, b)

        torch_name = "torch.matmul"
    elif op == "softmax":
        M, N = shape
        x = torch.randn(M, N) * 4
        kernel, result, tuning_s = tune(
            softmax_cpu.softmax_kernel, softmax_cpu.configs, (M, N), args.warmup, args.rep
        )
        torch.testing.assert_close(kernel(x), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)

        def kernel_fn():
            return kernel(x)

        def torch_fn():
            return torch.softmax(x, -1)

        torch_name = "torch.softmax"
    else:
        M, N = shape
        x, w = torch.randn(M, N) * 4, torch.rand(N) + 0.5
        kernel, result, tuning_s = tune(
            rmsnorm_cpu.rmsnorm_kernel, rmsnorm_cpu.configs, (M, N), args.warmup, args.rep
        )
        torch.testing.assert_close(kernel(x, w), rmsnorm_cpu.reference(x, w), rtol=1e-5, atol=1e-5)
        rms_norm = torch.nn.functional.rms_norm

        def kernel_fn():
            return kernel(x, w)

        def torch_fn():
            return rms_norm(x, (N,), w, 1e-6)

        torch_name = "F.rms_norm"
    timing = compare(kernel_fn, torch_fn, args.rounds, args.calls, args.pause_ms / 1e3)
    passed = sum(t.ok for t in result.trials)
    return {
        **case,
        "torch_op": torch_name,
        "config": kernel.config,
        "kernel_threads": kernel.num_threads,
        "pool": kernel.thread_pool,  # "tileauto", "tvm" (TILEAUTO_THREAD_POOL=tvm), None: serial
        "configs": len(result.trials),
        "passed": passed,
        "tuning_s": tuning_s,
        "tuned_latency_ms": result.latency,
        "default_latency_ms": result.default_trial.latency_ms,
        "target": TARGETS[op],
        **timing,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemm", type=int, nargs="*", default=[256, 512, 1024], help="M=N=K")
    parser.add_argument(
        "--rows", type=int, nargs="*", default=[1024, 4096], help="softmax/RMSNorm M"
    )
    parser.add_argument("--cols", type=int, default=1024, help="softmax/RMSNorm N")
    parser.add_argument("--warmup", type=int, default=5, help="tuning warm-up runs per config")
    parser.add_argument("--rep", type=int, default=20, help="tuning repetitions per config")
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=10, help="timed calls per side and round")
    parser.add_argument(
        "--pause-ms", type=float, default=300.0, help="pause before each side (TVM spins ~150 ms)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds (smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.gemm, args.rows, args.rounds, args.calls = [256], [1024], 3, 3
    torch.set_num_threads(CORES)
    print(
        f"\ntuned kernels vs torch: {CORES} cores, torch threads {torch.get_num_threads()}, "
        f"TVM_NUM_THREADS {os.environ.get('TVM_NUM_THREADS')}; tuning warmup {args.warmup}, rep {args.rep}; "
        f"{args.rounds} interleaved rounds x {args.calls} calls"
    )
    results = []
    for case in cases(args):
        load_before = os.getloadavg()[0]
        results.append(run_case(case, args))
        r = results[-1]
        r["load_before"], r["load_after"] = load_before, os.getloadavg()[0]
        r["spin"] = os.environ.get(SPIN_VAR)  # the busy-machine rule's choice (or yours)
        r["verdict"] = "met" if max(r["ratio_min"], r["ratio"]) <= r["target"] else "MISSED"
        print(
            f"  {r['label']}: tuned {r['configs']} configs ({r['passed']} passed) in "
            f"{r['tuning_s']:.1f} s -> {r['config']}, threads {r['kernel_threads'] or 'none (serial)'} "
            f"({r['pool'] or 'no'} pool; tuned median {r['tuned_latency_ms']:.3f} ms)",
            flush=True,
        )
    header = (
        f"{'case':<20} {'torch op':<14} {'kernel ms':>10} {'torch ms':>10} {'ratio med':>10} "
        f"{'kernel min':>11} {'torch min':>10} {'ratio min':>10} {'target':>7} {'load':>9}  verdict"
    )
    print()
    print(header)
    print("-" * len(header))
    for r in results:
        verdict = r["verdict"]
        print(
            f"{r['label']:<20} {r['torch_op']:<14} {r['kernel_ms']:10.3f} {r['torch_ms']:10.3f} "
            f"{r['ratio']:10.2f} {r['kernel_min_ms']:11.3f} {r['torch_min_ms']:10.3f} "
            f"{r['ratio_min']:10.2f} {'<= ' + format(r['target'], 'g'):>7} "
            f"{r['load_before']:4.1f}-{r['load_after']:<4.1f}  {verdict}"
        )
    print(
        "\nratio med: median over rounds of (kernel median / torch median) in that round; "
        "ratio min: fastest kernel call / fastest torch call; load: 1-minute load average "
        "before and after the case; met: both ratios within the target"
    )
    decision = current_decision()
    if decision is not None:
        print(f"\nTVM's thread pool in this process: {decision.describe()}")
    print("\nmixed use, each op called right after the other one (median over rounds):")
    for r in results:
        print(
            f"  {r['label']:<20} {r['torch_op']} right after the kernel: "
            f"{r['torch_after_kernel']:5.2f}x its time alone; the kernel right after "
            f"{r['torch_op']}: {r['kernel_after_torch']:5.2f}x"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"cores": CORES, "rounds": args.rounds, "calls": args.calls, "cases": results}
        args.json.write_text(json.dumps(payload, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
