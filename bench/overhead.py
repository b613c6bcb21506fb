"""Per-call overhead of a tuned JITKernel, of prepare(), of the raw TVM function and of torch.

    python bench/overhead.py [--n 16] [--calls 10000] [--rounds 15] [--json PATH]

Tunes ``B = A * 2`` on ``n`` float32 (a few vector widths, tuning cache off), then times, on
the same tiny tensors, in interleaved rounds of ``--calls`` calls each (the order rotates every
round, so no variant always runs first or last):

- (a) ``raw``: the compiled TVM function with a preallocated output, ``f(a, out)``;
- (b) ``raw + alloc``: the same with a fresh ``torch.empty`` output on every call, which is what
  a user of the raw function must do to get a new output each time;
- (c) ``kernel(a)``: the JITKernel, which allocates and returns its output;
- (c') ``kernel(a, out)``: the JITKernel given its output (destination passing), the like of (a);
- (d) ``prepare``: ``p = kernel.prepare(a)`` once, then ``p()``;
- (e) ``torch.mul(a, 2, out=out)`` and (f) ``a * 2``: torch doing the same work;
- ``torch.empty`` alone (the allocation every fresh-output call pays), a JITKernel with a
  symbolic shape (the general call path), and an empty loop (the loop's own cost, in every
  figure).

Each figure is nanoseconds per call (the round's total over ``--calls``); ratios are taken
within a round (both sides measured seconds apart) and the median over rounds is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
os.environ["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
os.environ["TILEAUTO_DISABLE_CACHE"] = "1"

import torch  # noqa: E402
from tvm import s_tir, te  # noqa: E402

import tileauto  # noqa: E402


def scale(n: int, vec: int = 4):
    """``B = A * 2`` on ``n`` float32, the loop split by ``vec`` and vectorized."""
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    _, inner = sch.split(i, [None, vec])
    sch.vectorize(inner)
    return sch.mod["main"]


def scale_symbolic():
    """``B = A * 2`` with A, B of symbolic length n (JITKernel binds n from A on each call)."""
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    return te.create_prim_func([a, b])


# Each variant is a loop written out in full, so that the only per-iteration work besides the
# call is the loop itself (the "empty loop" row measures that).
def _variants(kernel, dyn_kernel, n: int) -> dict[str, tuple[str, object]]:
    func = kernel.get_function()
    a = torch.randn(n)
    out = torch.empty(n)
    prepared = kernel.prepare(a)
    empty = torch.empty
    mul = torch.mul
    torch.testing.assert_close(kernel(a), a * 2)
    torch.testing.assert_close(prepared(), a * 2)
    torch.testing.assert_close(dyn_kernel(a), a * 2)
    assert kernel(a, out) is out

    def raw(calls):
        for _ in range(calls):
            func(a, out)

    def raw_alloc(calls):
        for _ in range(calls):
            func(a, empty(n))

    def jit_call(calls):
        for _ in range(calls):
            kernel(a)

    def jit_out_call(calls):
        for _ in range(calls):
            kernel(a, out)

    def prepare_call(calls):
        for _ in range(calls):
            prepared()

    def torch_out(calls):
        for _ in range(calls):
            mul(a, 2, out=out)

    def torch_op(calls):
        for _ in range(calls):
            a * 2  # noqa: B018 - the expression is the work being timed

    def alloc_only(calls):
        for _ in range(calls):
            empty(n)

    def jit_symbolic(calls):
        for _ in range(calls):
            dyn_kernel(a)

    def empty_loop(calls):
        for _ in range(calls):
            pass

    return {
        "raw": ("(a) raw TVM function f(a, out)", raw),
        "raw_alloc": (f"(b) raw + torch.empty({n}) per call", raw_alloc),
        "jit": ("(c) JITKernel k(a)", jit_call),
        "jit_out": ("(c') JITKernel k(a, out)", jit_out_call),
        "prepare": ("(d) p = k.prepare(a); p()", prepare_call),
        "torch_out": ("(e) torch.mul(a, 2, out=out)", torch_out),
        "torch": ("(f) a * 2", torch_op),
        "alloc": (f"torch.empty({n}) alone", alloc_only),
        "jit_symbolic": ("JITKernel, symbolic shape", jit_symbolic),
        "loop": ("empty loop", empty_loop),
    }


def measure(variants: dict, calls: int, rounds: int) -> dict[str, list[float]]:
    """Nanoseconds per call of each variant, one value per round, variants interleaved."""
    names = list(variants)
    for name in names:  # warm every path once before timing
        variants[name][1](min(calls, 1000))
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            loop = variants[name][1]
            start = time.perf_counter_ns()
            loop(calls)
            per_round[name].append((time.perf_counter_ns() - start) / calls)
    return per_round


def _ratio(per_round: dict[str, list[float]], num: str, den: str) -> float:
    return statistics.median(a / b for a, b in zip(per_round[num], per_round[den]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16, help="elements of the tensors (default 16)")
    parser.add_argument("--calls", type=int, default=10000, help="calls per round and variant")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = min(args.rounds, 5)
    torch.set_num_threads(int(os.environ["TVM_NUM_THREADS"]))

    impl = tileauto.jit(out_idx=[-1], target="llvm")(scale)
    tuned = tileauto.autotune(
        configs=[{"vec": v} for v in (4, 8, 16) if v <= args.n], warmup=10, rep=50, verbose=False
    )(impl)
    kernel = tuned(args.n)
    dyn_kernel = tileauto.jit(out_idx=[-1], target="llvm")(scale_symbolic)()
    variants = _variants(kernel, dyn_kernel, args.n)
    per_round = measure(variants, args.calls, args.rounds)

    print(
        f"\nper-call overhead: B = A * 2 on {args.n} float32, tuned config {kernel.config}, "
        f"{args.rounds} interleaved rounds x {args.calls} calls"
    )
    header = (
        f"{'variant':<38} {'median ns':>10} {'min ns':>8} {'/ (a) raw':>10} {'/ (b) raw+alloc':>16}"
    )
    print(header)
    print("-" * len(header))
    figures: dict[str, dict[str, float | str]] = {}
    for name, (label, _) in variants.items():
        values = per_round[name]
        figures[name] = {
            "label": label,
            "median_ns": statistics.median(values),
            "min_ns": min(values),
            "vs_raw": _ratio(per_round, name, "raw"),
            "vs_raw_alloc": _ratio(per_round, name, "raw_alloc"),
        }
        f = figures[name]
        print(
            f"{label:<38} {f['median_ns']:10.1f} {f['min_ns']:8.1f} {f['vs_raw']:10.2f} "
            f"{f['vs_raw_alloc']:16.2f}"
        )
    jit_raw = figures["jit"]["vs_raw"]
    jit_out_raw = figures["jit_out"]["vs_raw"]
    jit_alloc = figures["jit"]["vs_raw_alloc"]
    prep_raw = figures["prepare"]["vs_raw"]
    alloc_raw = figures["alloc"]["vs_raw"]
    print("\nratios are medians over rounds of (variant / baseline) measured in the same round")
    print(
        f"JITKernel k(a, out) / (a) raw f(a, out), like for like: {jit_out_raw:.2f} "
        f"(target <= 1.5: {'met' if jit_out_raw <= 1.5 else 'MISSED'})"
    )
    print(
        f"JITKernel k(a) / (b) raw + allocation, like for like: {jit_alloc:.2f} (target <= 1.5: "
        f"{'met' if jit_alloc <= 1.5 else 'MISSED'})"
    )
    print(
        f"JITKernel k(a) / (a) raw with its output preallocated: {jit_raw:.2f} (not like for "
        f"like: torch.empty alone costs {alloc_raw:.2f}x (a), so no call that returns a fresh "
        f"tensor can come within 1.5x of a call that allocates nothing)"
    )
    print(
        f"prepare()() / (a) raw: {prep_raw:.2f} (target <= 1.1: "
        f"{'met' if prep_raw <= 1.1 else 'MISSED'})"
    )
    print(
        f"JITKernel call / (f) torch a * 2: {figures['jit']['median_ns'] / figures['torch']['median_ns']:.2f}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "n": args.n,
                    "calls": args.calls,
                    "rounds": args.rounds,
                    "config": kernel.config,
                    "variants": figures,
                    "per_round_ns": per_round,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
