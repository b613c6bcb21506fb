"""tileauto.run.timing on the CPU: warm-up and timed call counts, sample shapes, errors.

The timers are called the way the run worker calls them (``timer(func, args, warmup=, rep=,
config=, device=)``), with a Python function that counts its calls and, once, a compiled TVM
kernel (the native loop when the helper is built).
"""

from __future__ import annotations

import pytest
import torch

from tileauto.run.timing import Timer, cpu_timer, cuda_timer, default_timer


class Counted:
    """A kernel stand-in: adds ``1`` to its first argument and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor, *rest) -> None:
        self.calls += 1
        x.add_(1)


def call(timer: Timer, func, args, warmup: int, rep: int) -> list[float]:
    return timer(func, args, warmup=warmup, rep=rep, config={"block": 32}, device="cpu")


@pytest.mark.parametrize(("warmup", "rep"), [(0, 1), (2, 5), (3, 17)])
@pytest.mark.parametrize("flush_bytes", [0, 1 << 16], ids=["no-flush", "flush"])
def test_cpu_timer_calls_warmup_plus_rep_times_and_returns_rep_samples(warmup, rep, flush_bytes):
    func = Counted()
    x = torch.zeros(4)
    samples = call(cpu_timer(flush_bytes), func, (x,), warmup, rep)
    assert func.calls == warmup + rep
    assert torch.equal(x, torch.full((4,), float(warmup + rep)))  # the same args every call
    assert isinstance(samples, list) and len(samples) == rep
    assert all(type(s) is float and s >= 0 for s in samples), samples


def test_samples_are_nanoseconds_of_each_call():
    import time

    def sleepy(x):
        time.sleep(0.002)

    samples = call(cpu_timer(), sleepy, (torch.zeros(1),), 0, 3)
    assert all(2e6 <= s < 2e9 for s in samples), samples  # 2 ms and more, but not seconds


def test_args_may_be_any_sequence_and_are_passed_in_order():
    seen = []
    timer = cpu_timer()
    call(timer, lambda *a: seen.append(a), [1, "b", 3.0], 1, 1)
    call(timer, lambda *a: seen.append(a), (4,), 0, 1)
    assert seen == [(1, "b", 3.0), (1, "b", 3.0), (4,)]


@pytest.mark.parametrize("rep", [0, -1])
def test_cpu_timer_refuses_no_repetition(rep):
    func = Counted()
    with pytest.raises(ValueError, match="repeat"):
        call(cpu_timer(), func, (torch.zeros(1),), 0, rep)


def test_a_failing_kernel_raises_through_the_timer():
    def broken(x):
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        call(cpu_timer(), broken, (torch.zeros(1),), 1, 3)


def test_a_kernel_failing_after_warmup_raises_too():
    func = Counted()

    def flaky(x):
        func(x)
        if func.calls > 2:
            raise RuntimeError("third call")

    with pytest.raises(RuntimeError, match="third call"):
        call(cpu_timer(), flaky, (torch.zeros(1),), 2, 3)
    assert func.calls == 3


def test_default_timer_picks_the_cpu_loop_off_the_gpu():
    for flush in (None, False, True):
        timer = default_timer("cpu", flush)
        func = Counted()
        assert len(call(timer, func, (torch.zeros(2),), 1, 4)) == 4 and func.calls == 5


def test_default_timer_picks_cuda_events_for_cuda():
    # building the timer touches no GPU; calling it needs one (see the GPU tests)
    timer = default_timer("cuda", None)
    assert timer.__qualname__ == cuda_timer().__qualname__ != cpu_timer().__qualname__


def test_cpu_timer_times_a_compiled_tvm_kernel():
    tvm = pytest.importorskip("tvm")
    from tvm import te

    n = 1024
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    func = tvm.compile(te.create_prim_func([a, b]), target="llvm")["main"]
    x = torch.arange(n, dtype=torch.float32)
    y = torch.zeros(n)
    samples = call(cpu_timer(), func, (x, y), 2, 6)
    assert len(samples) == 6 and all(type(s) is float and s > 0 for s in samples)
    torch.testing.assert_close(y, x * 2)
