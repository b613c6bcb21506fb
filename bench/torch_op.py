"""The call overhead of ``tileauto.torch_op`` against a hand-written ``torch.library.custom_op``.

    python bench/torch_op.py [--rounds 61] [--configs 4] [--threads 1]

Tunes the SwiGLU example (``examples/elementwise_cpu.py``, its first ``--configs`` configs; a
private cache folder, so every run tunes) for a tiny tensor (1x16) and a 512x512 one, then
times, on the same tensors, in interleaved rounds (the order rotates every round):

- ``torch_op``: ``op(gate, up)``, the op ``tileauto.torch_op`` made;
- ``hand-written``: what users write today, a ``torch.library.custom_op`` with a
  ``register_fake`` whose body calls the same tuned factory, ``swiglu(*gate.shape)(gate, up)``;
- ``kernel``: the tuned JITKernel called directly (no op), the floor of both;
- ``compiled``: ``torch.compile(f, fullgraph=True)`` of ``f = op(gate, up) * 2 + up``, against
  ``eager``: the same ``f`` run eagerly.

Torch and the kernel run on one thread (``--threads``), so that a shared machine's scheduler
moves them less. Each figure is microseconds per call (the round's total over its calls), the median over
rounds; ``op over`` and ``hand over`` are each op's time beyond the kernel's (its overhead).
Each ratio is taken within a round and the median over rounds is printed. The goal is
``torch_op / hand-written <= 1.2``.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ["TILEAUTO_CACHE_DIR"] = tempfile.mkdtemp(prefix="tileauto-bench-torch-op-")
atexit.register(shutil.rmtree, os.environ["TILEAUTO_CACHE_DIR"], ignore_errors=True)

import torch  # noqa: E402

import tileauto  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import elementwise_cpu  # noqa: E402

SIZES = ((1, 16), (512, 512))


def _time_us(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _hand_written(factory: Callable[..., object]) -> Callable[..., torch.Tensor]:
    """The op a user writes by hand around the same tuned factory."""

    @torch.library.custom_op("tileauto_bench::swiglu_by_hand", mutates_args=())
    def swiglu_by_hand(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return factory(*gate.shape)(gate, up)  # type: ignore[operator]

    @swiglu_by_hand.register_fake
    def _(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(gate)

    return swiglu_by_hand


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--configs", type=int, default=4, help="configs of the example to tune")
    parser.add_argument("--threads", type=int, default=1, help="torch's and the kernel's threads")
    args = parser.parse_args(argv)
    if min(args.rounds, args.configs, args.threads) < 1:
        parser.error("--rounds, --configs and --threads must be >= 1")
    if args.threads > (os.cpu_count() or 1):
        parser.error(f"--threads {args.threads}: this machine has {os.cpu_count()} CPUs")

    def space(M: int, N: int) -> list[dict]:
        return elementwise_cpu.configs(M, N)[: args.configs]

    # one thread, torch's and the kernel's: on a shared machine a parallel kernel's time
    # swings with the scheduler, which would drown the overheads compared here
    torch.set_num_threads(args.threads)
    swiglu = tileauto.autotune(
        configs=space, warmup=5, rep=20, num_threads=args.threads, verbose=False
    )(elementwise_cpu.swiglu)
    op = tileauto.torch_op("tileauto_bench::swiglu", swiglu, problem=lambda gate, up: gate.shape)
    by_hand = _hand_written(swiglu)

    def f(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return op(gate, up) * 2 + up

    compiled = torch.compile(f, fullgraph=True)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"{'size':>9}  {'torch_op':>9}  {'by hand':>9}  {'kernel':>9}  {'op/hand':>7}  "
          f"{'op over':>9}  {'hand over':>9}  {'compiled':>9}  {'eager':>9}  {'c/eager':>7}")  # fmt: skip
    ok = True
    for M, N in SIZES:
        torch.manual_seed(0)
        gate, up = torch.randn(M, N), torch.randn(M, N)
        kernel = swiglu(M, N)  # tunes once
        expected = torch.nn.functional.silu(gate) * up
        for fn in (op, by_hand, kernel):
            torch.testing.assert_close(fn(gate, up), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(compiled(gate, up), f(gate, up), rtol=1e-5, atol=1e-5)
        calls = 500 if M * N < 4096 else 20  # short rounds, many of them: load spikes average out
        variants = {
            name: functools.partial(fn, gate, up)
            for name, fn in (
                ("op", op),
                ("hand", by_hand),
                ("kernel", kernel),
                ("compiled", compiled),
                ("eager", f),
            )
        }
        rows: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                rows[name].append(_time_us(variants[name], calls))
        med = {name: statistics.median(v) for name, v in rows.items()}
        op_ratio = statistics.median(o / h for o, h in zip(rows["op"], rows["hand"]))
        compile_ratio = statistics.median(c / e for c, e in zip(rows["compiled"], rows["eager"]))
        ok &= op_ratio <= 1.2
        over_op = statistics.median(o - k for o, k in zip(rows["op"], rows["kernel"]))
        over_hand = statistics.median(h - k for h, k in zip(rows["hand"], rows["kernel"]))
        print(f"{M:>4}x{N:<4}  {med['op']:>7.1f}us  {med['hand']:>7.1f}us  {med['kernel']:>7.1f}us  "
              f"{op_ratio:>6.2f}x  {over_op:>7.1f}us  {over_hand:>7.1f}us  "
              f"{med['compiled']:>7.1f}us  {med['eager']:>7.1f}us  {compile_ratio:>6.2f}x")  # fmt: skip
    print("torch_op / by hand within the 1.2x goal" if ok else "torch_op / by hand ABOVE 1.2x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
