"""Measure a compiled kernel: warmup, then ``rep`` timed repetitions, samples in nanoseconds.

CPU: the native loop of ``src/`` (no Python between iterations) or a perf_counter loop.
CUDA: CUDA events around each repetition, with the L2 cache flushed before each one.
A timer is a plain callable, so tests pass a scripted one and know the winner in advance.
:func:`iterations` turns the profile's milliseconds into the counts a timer is given; the
default timer's cache flush (:func:`default_flush`) counts in them, as in Triton's do_bench.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tileauto.options import MAX_ITERATIONS, ProfileArgs

MIN_REP_ITERS = 3  # a median and a spread need a few samples, however slow the kernel
ESTIMATE_CALLS = 3
CPU_FLUSH_BYTES = 64 * 2**20  # what flush_cache=True writes before each timed run on a CPU

# A flush: what a timer does before each timed run (outside the timed region) to start it
# with cold caches. :func:`iterations` counts its cost in each run.
Flush = Callable[[], None]


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

        flush_l2 = _cuda_flush(torch.cuda.current_device()) if flush else None
        for _ in range(warmup):
            func(*args)
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        for i in range(rep):
            if flush_l2 is not None:
                flush_l2()
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
    return cpu_timer(flush_bytes=CPU_FLUSH_BYTES if flush else 0)


def default_flush(device: str, flush: bool | None) -> Flush | None:
    """The flush :func:`default_timer` does before each timed run (None: it does none), for
    :func:`iterations` to count: the same work, on a buffer of the same size.

    On a CPU the timer's own flush runs in the native loop; this one writes and reads as many
    bytes the same way. Made once per process and device (its buffer is reused)."""
    if device == "cuda":
        if flush is not None and not flush:
            return None
        import torch

        return _cuda_flush(torch.cuda.current_device())
    return _cpu_flush() if flush else None


@functools.cache
def _cpu_flush() -> Flush:
    from tileauto._native import _make_flusher

    flush_round = _make_flusher(CPU_FLUSH_BYTES)
    assert flush_round is not None
    rounds = itertools.count(1)

    def flush() -> None:
        flush_round(next(rounds))  # a new fill value each time, as the native loop's

    return flush


@functools.cache
def _cuda_flush(device_index: int) -> Flush:
    """Zero a buffer twice the L2 size of GPU ``device_index`` (the current one), made once."""
    import torch

    buf = torch.empty(2 * l2_cache_bytes() // 4, dtype=torch.int32, device=f"cuda:{device_index}")

    def flush() -> None:
        buf.zero_()

    return flush


def iterations(
    profile: ProfileArgs,
    func: Callable[..., Any],
    args: Sequence[Any],
    device: str,
    flush: Flush | None = None,
) -> tuple[int, int]:
    """Warm-up and timed iteration counts for one kernel, as TileLang and Triton resolve them.

    ``warmup_iters``/``rep_iters`` are used as given; otherwise the counts are ``warmup`` and
    ``rep`` milliseconds divided by a first estimate of one call (the median of a few calls),
    at least ``MIN_REP_ITERS`` timed runs and at most ``MAX_ITERATIONS`` of each, so a slow
    config costs bounded time and a fast one is timed long enough to be measured.

    ``flush``: what the timer does before each timed run (:func:`default_flush`). Its cost is
    part of each timed run's, as in Triton's ``do_bench``: the timed runs fill about ``rep`` ms
    with their flushes (a 10 ms flush and ``rep=100`` give 10 runs, not ``100 / call``, which
    for a microsecond kernel was a million flushes). The warm-up does not flush.
    """
    if profile.warmup_iters is not None and profile.rep_iters is not None:
        return profile.warmup_iters, profile.rep_iters
    call_ms, flush_ms = _estimate_ms(func, args, device, flush)
    one_ms = max(call_ms, 1e-5)
    n_warmup = profile.warmup_iters
    if n_warmup is None:
        n_warmup = (
            min(MAX_ITERATIONS, math.ceil(profile.warmup / one_ms)) if profile.warmup > 0 else 0
        )
    n_rep = profile.rep_iters
    if n_rep is None:
        per_run_ms = one_ms + flush_ms
        n_rep = min(MAX_ITERATIONS, max(MIN_REP_ITERS, math.ceil(profile.rep / per_run_ms)))
    return n_warmup, n_rep


def _estimate_ms(
    func: Callable[..., Any], args: Sequence[Any], device: str, flush: Flush | None = None
) -> tuple[float, float]:
    """The median wall times of a few calls and of the flushes before them, in ms (the kernel
    ran once already, in the check). With a flush each call follows one, as a timed run does;
    without one the flush's time is 0."""
    calls, flushes = [], []
    for _ in range(ESTIMATE_CALLS):
        if flush is not None:
            start = time.perf_counter_ns()
            flush()
            _sync(device)
            flushes.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        func(*args)
        _sync(device)
        calls.append(time.perf_counter_ns() - start)
    return _median(calls) / 1e6, (_median(flushes) / 1e6 if flushes else 0.0)


def _median(values: list[int]) -> int:
    return sorted(values)[len(values) // 2]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
