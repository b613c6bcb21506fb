"""Code the example kernels share: checks, CPU schedule helpers, timing and ``main()`` pieces.

Not an example itself: the examples import it as a top-level module. Run as a script, an
example has this folder on ``sys.path``; ``testing/examples/conftest.py`` puts it there for the
tests, and worker processes inherit it. The CUDA-only helpers are in ``_cuda_common.py``.
Importing this module (before ``tileauto``) also lets ``import tileauto`` work from a source
checkout that is not installed.

A factory imports the helpers it calls by name (``from _common import row_reduce``): tileauto's
cache key fingerprints the functions a factory reads as globals, but not what it would reach
through a module attribute such as ``_common.row_reduce``.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

try:
    import tileauto  # noqa: F401  (only the fallback below matters)
except ImportError:  # a source checkout that is not installed: use the repo next to us
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def check_shape(M: int, N: int) -> None:
    """Raise ``ValueError`` unless the (M, N) tensor shape is positive."""
    if M < 1 or N < 1:
        raise ValueError(f"M and N must be positive, got M={M!r}, N={N!r}")


def config_label(cfg: dict) -> str:
    """``k=v,k=v`` for a config, ``default`` for the empty one."""
    return ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"


# -- CPU row kernels (softmax_cpu, rmsnorm_cpu): schedule helpers and configs -------------------


def row_reduce(name, combine, value, M, N, width):
    """``combine`` over the last axis of ``value(i, j)`` as two TE stages.

    Stage ``<name>_part[i, w]`` reduces columns ``w, w + width, ...`` of the first
    ``N // width * width`` columns (vectorizable over ``w``); stage ``<name>[i]`` reduces those
    ``width`` partials and the remaining tail columns. Returns ``(result, part or None)``.
    """
    from tvm import te  # TVM is imported by the factories that use it, not by importing this

    nk = N // width
    if nk < 2 or width < 2:  # a row of less than two steps: a plain reduction
        r = te.reduce_axis((0, N), name=f"{name}_r")
        return te.compute((M,), lambda i: combine(value(i, r), axis=r), name=name), None
    ko = te.reduce_axis((0, nk), name=f"{name}_ko")
    part = te.compute(
        (M, width), lambda i, w: combine(value(i, ko * width + w), axis=ko), name=f"{name}_part"
    )
    tail = N - nk * width
    r = te.reduce_axis((0, width + tail), name=f"{name}_r")
    if tail == 0:
        return te.compute((M,), lambda i: combine(part[i, r], axis=r), name=name), part

    def finish(i):
        # r < width: a partial; r >= width: tail column nk * width + (r - width).
        # The clamps keep both loads in bounds; only the selected one is used.
        from_part = part[i, te.min(r, width - 1)]
        from_tail = value(i, nk * width + te.max(r - width, 0))
        return combine(te.if_then_else(r < width, from_part, from_tail), axis=r)

    return te.compute((M,), finish, name=name), part


def vectorize_row(sch, loop, extent, vec):
    """Vectorize a row loop: a main part of whole vectors, then a scalar tail loop."""
    main = extent // vec * vec
    if main == 0:
        return
    if main < extent:
        loop, _tail = sch.loop_partition(loop, [main, None])
    _, lanes = sch.split(loop, [None, vec])
    sch.vectorize(lanes)


def schedule_partial(sch, block, vec):
    """Put the lanes of a ``*_part`` stage innermost and vectorize them."""
    w, ko = sch.get_loops(block)[-2:]
    sch.reorder(ko, w)
    acc, lanes = sch.split(w, [None, vec])
    sch.unroll(acc)
    sch.vectorize(lanes)
    sch.decompose_reduction(block, ko)


def row_configs(M: int) -> list[dict]:
    """The 16 configs of the CPU row kernels (``rows`` clamped to M).

    Vector width, rows per task, independent accumulators, serial vs parallel.
    """
    out = []
    for vec, rows, unroll, parallel in [
        (16, 4, 2, True),
        (16, 1, 2, True),
        (16, 16, 2, True),
        (16, 64, 2, True),
        (16, 4, 1, True),
        (16, 4, 4, True),
        (16, 16, 4, True),
        (8, 4, 2, True),
        (8, 4, 4, True),
        (8, 16, 1, True),
        (32, 4, 1, True),
        (32, 16, 2, True),
        (4, 4, 4, True),
        (4, 16, 1, True),
        (16, 4, 2, False),
        (8, 4, 1, False),
    ]:
        cfg = {"vec": vec, "rows": min(rows, M), "unroll": unroll, "parallel": parallel}
        if cfg not in out:
            out.append(cfg)
    return out


# -- timing and main() --------------------------------------------------------------------------


def bench_ms(fn, *args, warmup: int = 3, reps: int = 20) -> float:
    """Median wall time of ``fn(*args)`` in milliseconds (perf_counter loop)."""
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def time_configs(
    kernel: Callable,
    sizes: Sequence[int],
    cfgs: list[dict],
    inputs: list,
    ref: torch.Tensor,
    baseline: tuple[str, float],
    *,
    bench: Callable[..., float],
    tol: dict,
    width: int,
    rate: Callable[[float], str],
    label: Callable[[dict], str] = config_label,
) -> None:
    """Print the ``(name, ms)`` baseline, then check and time ``kernel(*sizes, **cfg)`` per config.

    ``rate(ms)`` formats the throughput of a row; ``tol`` goes to ``assert_close``.
    """
    name, ms = baseline
    print(f"{name:>{width}}: {ms:8.3f} ms {rate(ms)}")
    precompile(kernel, sizes, cfgs)
    for cfg in cfgs:
        kern = kernel(*sizes, **cfg)
        torch.testing.assert_close(kern(*inputs), ref, **tol)
        ms = bench(kern, *inputs)
        print(f"{label(cfg):>{width}}: {ms:8.3f} ms {rate(ms)}")


def precompile(kernel: Callable, sizes: Sequence[int], cfgs: list[dict]) -> None:
    """Compile ``kernel(*sizes, **cfg)`` for every config at once, in tileauto's parallel
    compile workers: the calls that follow find them compiled (a config that fails raises
    its ``CompileError`` at its call, as it would without this)."""
    names = list(inspect.signature(kernel.factory).parameters)
    kernel.par_compile([{**dict(zip(names, sizes)), **cfg} for cfg in cfgs])


def cpu_args(
    argv: list[str] | None,
    doc: str,
    *,
    default: int = 2048,
    dims: tuple[str, ...] = ("M", "N"),
    flag: str = "--shape",
    flag_help: str = "tensor shape",
) -> tuple[tuple[int, ...], bool]:
    """Parse ``--size``, ``flag`` (one int per dim) and ``--all``: ``(sizes, all)``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    size_help = f"{' = '.join(dims)} (default {default})"
    parser.add_argument("--size", type=int, default=default, help=size_help)
    parser.add_argument(flag, type=int, nargs=len(dims), metavar=dims, help=flag_help)
    parser.add_argument("--all", action="store_true", help="time every config of configs()")
    args = parser.parse_args(argv)
    return tuple(getattr(args, flag.lstrip("-")) or (args.size,) * len(dims)), args.all


def cpu_check_and_time(
    kernel: Callable,
    sizes: Sequence[int],
    inputs: list,
    reference: Callable,
    candidates: list[dict],
    show_all: bool,
    *,
    header: str,
    baseline: str,
    tol: dict,
    show_err: bool = False,
    **table,
) -> int:
    """A CPU example's ``main()`` once its inputs exist: check, then time against torch.

    Times ``reference`` first (before any TVM thread pool spins), checks the default config of
    ``kernel`` and prints ``header`` (and the largest error with ``show_err``), then times the
    default config and about five of the ``candidates`` (all of them with ``show_all``).
    ``table`` (width, rate, label) goes to :func:`time_configs`.
    """
    ref = reference(*inputs)
    t_ref = bench_ms(reference, *inputs)  # before any TVM thread pool spins
    out = kernel(*sizes)(*inputs)  # default config
    torch.testing.assert_close(out, ref, **tol)
    err = f" (max abs err {(out - ref).abs().max().item():.2e})" if show_err else ""
    import tvm

    print(f"{header}{err}; TVM threads {tvm.runtime.num_threads()}")
    shown = [{}] + (candidates if show_all else candidates[:: max(1, len(candidates) // 5)])
    torch_row = (baseline, t_ref)
    time_configs(kernel, sizes, shown, inputs, ref, torch_row, bench=bench_ms, tol=tol, **table)
    return 0


def use_all_cores() -> None:
    """Run a CPU example on every core (call before TVM's thread pool starts)."""
    # TVM's pool uses half the x86 cores unless told (it assumes hyper-threads): use them all.
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
