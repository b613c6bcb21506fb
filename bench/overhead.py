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
- (e) ``torch.mul(a, b, out=out)``, (f) ``torch.mul(a, b)`` and ``torch.add(a, b)``: torch ops
  on two tensors, the cheapest torch call there is (a Python scalar, as in ``a * 2``, costs
  torch more than a second tensor does, so it would flatter tileauto);
- a 16x16x16 GEMM: the example GEMM (``examples/gemm_cpu.py``) tuned over its config space
  and called as a JITKernel, against ``torch.matmul`` on the same tensors; its tuned latency
  (the kernel alone, timed by the native loop) splits the call into kernel and overhead;
- ``torch.empty`` alone (the allocation every fresh-output call pays), a JITKernel with a
  symbolic shape (the general call path), and an empty loop (the loop's own cost, in every
  figure);
- ``B = A + k`` on ``n`` int32 with ``k`` an int32 scalar argument, called ``k(a, 3)``: the C
  call slot range-checks the scalar (TVM would wrap one out of range) and calls the kernel,
  against the same call through the Python call path (``_call_python``), which is what every
  call of a kernel with integer scalars took before the check moved into C.

Each figure is nanoseconds per call (the round's total over ``--calls``); ratios are taken
within a round (both sides measured seconds apart) and the median over rounds is printed.
Nothing sets ``TVM_NUM_THREADS``: the kernels run as in a user's process (tileauto's thread
rule, ``docs/tuning.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["TILEAUTO_AUTO_TUNING_DISABLE_CACHE"] = "1"
os.environ["TILEAUTO_DISABLE_CACHE"] = "1"

import torch  # noqa: E402
from tvm import s_tir, te  # noqa: E402

import tileauto  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gemm_cpu  # noqa: E402


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


def add_int_scalar(n: int):
    """``B = A + k`` on ``n`` int32, ``k`` an int32 scalar argument."""
    a = te.placeholder((n,), "int32", name="A")
    k = te.var("k", "int32")
    b = te.compute((n,), lambda i: a[i] + k, name="B")
    return te.create_prim_func([a, k, b])


# Each variant is a loop written out in full, so that the only per-iteration work besides the
# call is the loop itself (the "empty loop" row measures that).
def _variants(kernel, dyn_kernel, gemms, scalar_kernel, n: int) -> dict[str, tuple[str, object]]:
    func = kernel.get_function()
    ia = torch.arange(n, dtype=torch.int32)
    torch.testing.assert_close(scalar_kernel(ia, 3), ia + 3)
    torch.testing.assert_close(scalar_kernel._call_python(ia, 3), ia + 3)
    scalar_python = scalar_kernel._call_python
    a = torch.randn(n)
    b = torch.randn(n)
    add = torch.add
    matmul = torch.matmul
    gemm, gemm_serial = gemms  # tuned, and the tuned config with parallel=False
    ga, gb = torch.randn(16, 16), torch.randn(16, 16)
    torch.testing.assert_close(gemm(ga, gb), ga @ gb, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gemm_serial(ga, gb), ga @ gb, rtol=1e-4, atol=1e-4)
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
            mul(a, b, out=out)

    def torch_op(calls):
        for _ in range(calls):
            mul(a, b)

    def torch_add(calls):
        for _ in range(calls):
            add(a, b)

    def torch_scalar(calls):
        for _ in range(calls):
            a * 2  # noqa: B018 - the expression is the work being timed

    def gemm_call(calls):
        for _ in range(calls):
            gemm(ga, gb)

    def gemm_serial_call(calls):
        for _ in range(calls):
            gemm_serial(ga, gb)

    def torch_matmul(calls):
        for _ in range(calls):
            matmul(ga, gb)

    def alloc_only(calls):
        for _ in range(calls):
            empty(n)

    def jit_symbolic(calls):
        for _ in range(calls):
            dyn_kernel(a)

    def jit_scalar(calls):
        for _ in range(calls):
            scalar_kernel(ia, 3)

    def jit_scalar_python(calls):
        for _ in range(calls):
            scalar_python(ia, 3)

    def empty_loop(calls):
        for _ in range(calls):
            pass

    return {
        "raw": ("(a) raw TVM function f(a, out)", raw),
        "raw_alloc": (f"(b) raw + torch.empty({n}) per call", raw_alloc),
        "jit": ("(c) JITKernel k(a)", jit_call),
        "jit_out": ("(c') JITKernel k(a, out)", jit_out_call),
        "prepare": ("(d) p = k.prepare(a); p()", prepare_call),
        "torch_out": ("(e) torch.mul(a, b, out=out)", torch_out),
        "torch": ("(f) torch.mul(a, b)", torch_op),
        "torch_add": ("torch.add(a, b)", torch_add),
        "torch_scalar": ("a * 2 (Python scalar)", torch_scalar),
        "gemm16": ("GEMM 16^3 tuned JITKernel k(a, b)", gemm_call),
        "gemm16_serial": ("GEMM 16^3 tuned, parallel=False", gemm_serial_call),
        "matmul16": ("torch.matmul 16^3", torch_matmul),
        "alloc": (f"torch.empty({n}) alone", alloc_only),
        "jit_symbolic": ("JITKernel, symbolic shape", jit_symbolic),
        "jit_scalar": ("JITKernel k(a, 3), int32 scalar", jit_scalar),
        "jit_scalar_py": ("the same, Python call path", jit_scalar_python),
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
    impl = tileauto.jit(out_idx=[-1], target="llvm")(scale)
    tuned = tileauto.autotune(
        configs=[{"vec": v} for v in (4, 8, 16) if v <= args.n],
        warmup_iters=10,
        rep_iters=50,
        verbose=False,
    )(impl)
    kernel = tuned(args.n)
    dyn_kernel = tileauto.jit(out_idx=[-1], target="llvm")(scale_symbolic)()
    gemm_jit = tileauto.jit(out_idx=[-1], target="llvm")(gemm_cpu.gemm)
    gemm_tuned = tileauto.autotune(
        configs=gemm_cpu.configs(16, 16, 16), warmup_iters=10, rep_iters=50, verbose=False
    )(gemm_jit)
    gemm16 = gemm_tuned(16, 16, 16)
    gemm16_ms = gemm_tuned.get_tuner_result(16, 16, 16).latency
    gemms = (gemm16, gemm_jit(16, 16, 16, parallel=False, **gemm16.config))
    scalar_kernel = tileauto.jit(out_idx=[-1], target="llvm")(add_int_scalar)(args.n)
    variants = _variants(kernel, dyn_kernel, gemms, scalar_kernel, args.n)
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
    vs_mul = _ratio(per_round, "jit", "torch")
    vs_add = _ratio(per_round, "jit", "torch_add")
    print(
        f"JITKernel k(a) / torch.mul(a, b): {vs_mul:.2f}, / torch.add(a, b): {vs_add:.2f} "
        f"(target <= 1: {'met' if max(vs_mul, vs_add) <= 1 else 'MISSED'})"
    )
    gemm_vs = _ratio(per_round, "gemm16", "matmul16")
    serial_vs = _ratio(per_round, "gemm16_serial", "matmul16")
    print(
        f"GEMM 16^3 JITKernel call / torch.matmul: {gemm_vs:.2f} (target <= 1: "
        f"{'met' if gemm_vs <= 1 else 'MISSED'}); with parallel=False: {serial_vs:.2f} "
        f"(threads {gemms[0].num_threads})"
    )
    kernel_ns = gemm16_ms * 1e6
    print(
        f"GEMM 16^3: the kernel alone (tuned latency) {kernel_ns:.0f} ns, so the call adds "
        f"{figures['gemm16']['median_ns'] - kernel_ns:.0f} ns; torch.matmul takes "
        f"{figures['matmul16']['median_ns']:.0f} ns in all; config {gemm16.config}"
    )
    scalar_vs = _ratio(per_round, "jit_scalar", "jit_scalar_py")
    print(
        f"JITKernel with an int32 scalar, k(a, 3): C call slot / Python call path {scalar_vs:.2f} "
        f"({figures['jit_scalar']['median_ns']:.0f} against "
        f"{figures['jit_scalar_py']['median_ns']:.0f} ns; the range check is in both)"
    )
    figures["summary"] = {
        "jit_vs_torch_mul": vs_mul,
        "jit_vs_torch_add": vs_add,
        "gemm16_vs_matmul": gemm_vs,
        "gemm16_serial_vs_matmul": serial_vs,
        "gemm16_kernel_ns": kernel_ns,
        "scalar_c_vs_python": scalar_vs,
        "label": "summary",
        "load_average": os.getloadavg()[0],
    }
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
