"""Measure a compiled kernel: warmup, then ``rep`` timed repetitions, samples in nanoseconds.

CPU: the native loop of ``src/`` (no Python between iterations) or a perf_counter loop.
CUDA: CUDA events around each repetition, with the L2 cache flushed before each one.
A timer is a plain callable, so tests pass a scripted one and know the winner in advance.
:func:`iterations` turns the profile's milliseconds into the counts a timer is given.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tileauto.options import MAX_ITERATIONS, ProfileArgs

MIN_REP_ITERS = 3  # a median and a spread need a few samples, however slow the kernel
ESTIMATE_CALLS = 3


class Timer(Protocol):
    """``timer(func, args, warmup=, rep=, config=, device=) -> per-repetition nanoseconds``."""

    def __call__(
        self,
        func: Callable[..., Any],
        args: Sequence[Any],
        *,
        warmup: int,
        rep: int,
        config: dict[str, Any],
        device: str,
    ) -> list[float]: ...


def cpu_timer(flush_bytes: int = 0) -> Timer:
    """The CPU timer (native loop when built, else Python), optionally flushing caches."""

    def timer(
        func: Callable[..., Any],
        args: Sequence[Any],
        *,
        warmup: int,
        rep: int,
        config: dict[str, Any],
        device: str,
    ) -> list[float]:
        from tileauto._native import time_function

        for _ in range(warmup):
            func(*args)
        return [float(s) for s in time_function(func, list(args), rep, flush_bytes=flush_bytes)]

    return timer


def l2_cache_bytes() -> int:
    """The L2 size of the current GPU (fallback 256 MiB when torch cannot tell)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    size = int(getattr(props, "L2_cache_size", 0) or 0)
    return size if size > 0 else 256 * 2**20


def cuda_timer(flush: bool = True) -> Timer:
    """CUDA events per repetition, with an L2 flush (a buffer twice the L2 size) before each."""

    def timer(
        func: Callable[..., Any],
        args: Sequence[Any],
        *,
        warmup: int,
        rep: int,
        config: dict[str, Any],
        device: str,
    ) -> list[float]:
        import torch

        flush_buf = (
            torch.empty(2 * l2_cache_bytes() // 4, dtype=torch.int32, device="cuda")
            if flush
            else None
        )
        for _ in range(warmup):
            func(*args)
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        for i in range(rep):
            if flush_buf is not None:
                flush_buf.zero_()
            starts[i].record()
            func(*args)
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e6 for s, e in zip(starts, ends)]

    return timer


def default_timer(device: str, flush: bool | None) -> Timer:
    """CUDA events on GPUs (flush on by default), the CPU loop elsewhere (flush off by default)."""
    if device == "cuda":
        return cuda_timer(flush=True if flush is None else flush)
    return cpu_timer(flush_bytes=(64 * 2**20) if flush else 0)


def iterations(
    profile: ProfileArgs, func: Callable[..., Any], args: Sequence[Any], device: str
) -> tuple[int, int]:
    """Warm-up and timed iteration counts for one kernel, as TileLang and Triton resolve them.

    ``warmup_iters``/``rep_iters`` are used as given; otherwise the counts are ``warmup`` and
    ``rep`` milliseconds divided by a first estimate of one call (the median of a few calls),
    at least ``MIN_REP_ITERS`` timed runs and at most ``MAX_ITERATIONS`` of each, so a slow
    config costs bounded time and a fast one is timed long enough to be measured.
    """
    if profile.warmup_iters is not None and profile.rep_iters is not None:
        return profile.warmup_iters, profile.rep_iters
    one_ms = max(_estimate_ms(func, args, device), 1e-5)
    n_warmup = profile.warmup_iters
    if n_warmup is None:
        n_warmup = (
            min(MAX_ITERATIONS, math.ceil(profile.warmup / one_ms)) if profile.warmup > 0 else 0
        )
    n_rep = profile.rep_iters
    if n_rep is None:
        n_rep = min(MAX_ITERATIONS, max(MIN_REP_ITERS, math.ceil(profile.rep / one_ms)))
    return n_warmup, n_rep


def _estimate_ms(func: Callable[..., Any], args: Sequence[Any], device: str) -> float:
    """The median wall time of a few calls, in ms (the kernel ran once already, in the check)."""
    times = []
    for _ in range(ESTIMATE_CALLS):
        start = time.perf_counter_ns()
        func(*args)
        if device == "cuda":
            import torch

            torch.cuda.synchronize()
        times.append(time.perf_counter_ns() - start)
    return sorted(times)[len(times) // 2] / 1e6
