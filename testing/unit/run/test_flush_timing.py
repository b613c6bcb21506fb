"""The cost of a cache flush counts in the number of timed runs (``flush_cache=True``).

Each timed run of a flushing timer writes its flush buffer first (64 MiB on a CPU), so the
number of runs that fills ``rep`` milliseconds is ``rep / (call + flush)``, as in Triton's
``do_bench``; counted on the call alone, a microsecond kernel got up to a million runs of
about 10 ms each and every config ran into its timeout. Nothing here asserts on elapsed time:
the counts come from a scripted clock, or are bounded far from what the old estimate gave.
"""

from __future__ import annotations

import time
import types

import pytest
from scale_builds import build_modes  # noqa: E402

from tileauto.options import ProfileArgs
from tileauto.records import TrialStatus
from tileauto.run import timing
from tileauto.run import worker as run_worker
from tileauto.run.session import RunRequest, SessionSpec
from tileauto.run.timing import MIN_REP_ITERS, iterations
from tileauto.run.worker import RunWorker

CALL_NS = 1_000  # a 1 us kernel
FLUSH_NS = 10_000_000  # a 10 ms flush, about the 64 MiB one of a CPU


class Clock:
    """A scripted ``perf_counter_ns``: only the kernel and the flush move it."""

    def __init__(self) -> None:
        self.now = 0
        self.calls = 0
        self.flushes = 0

    def perf_counter_ns(self) -> int:
        return self.now

    def kernel(self, *args) -> None:
        self.calls += 1
        self.now += CALL_NS

    def flush(self) -> None:
        self.flushes += 1
        self.now += FLUSH_NS


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter_ns=c.perf_counter_ns))
    return c


@pytest.mark.parametrize(("rep", "runs"), [(10, MIN_REP_ITERS), (100, 10), (1000, 100)])
def test_the_timed_runs_fill_rep_milliseconds_with_their_flushes(clock, rep, runs):
    profile = ProfileArgs(warmup=1, rep=rep)
    n_warmup, n_rep = iterations(profile, clock.kernel, (), "cpu", clock.flush)
    # rep / (0.001 + 10) ms: not rep / 0.001 ms (10,000 runs of 10 ms for rep=10)
    assert n_rep == runs
    # the warm-up does not flush: its calls are counted on the call alone
    assert n_warmup == 1_000
    # the estimate flushed before each of its calls, as a timed run does
    assert clock.flushes == clock.calls == timing.ESTIMATE_CALLS


def test_without_a_flush_the_counts_are_the_calls_alone(clock):
    n_warmup, n_rep = iterations(ProfileArgs(warmup=1, rep=10), clock.kernel, (), "cpu")
    assert (n_warmup, n_rep) == (1_000, 10_000)
    assert clock.flushes == 0


def test_exact_counts_are_used_as_given_with_a_flush(clock):
    profile = ProfileArgs(warmup_iters=2, rep_iters=500)
    assert iterations(profile, clock.kernel, (), "cpu", clock.flush) == (2, 500)
    assert clock.calls == clock.flushes == 0  # nothing to estimate


def test_the_default_flush_is_the_default_timers():
    default_flush = timing.default_flush
    assert default_flush("cpu", None) is None and default_flush("cpu", False) is None
    flush = default_flush("cpu", True)
    assert flush is not None and flush is default_flush("cpu", True)  # one buffer a process
    flush()  # writes and reads its 64 MiB, as the native loop's flush does
    assert default_flush("cuda", False) is None  # no GPU needed to say there is no flush


# -- in the run worker --------------------------------------------------------------------------
N = 256


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_modes(tmp_path_factory.mktemp("built"), N, ("ok",))


def spec_for(artifact, *, flush, timer=None, **profile) -> SessionSpec:
    return SessionSpec(
        params=artifact.params,
        out_pos=artifact.out_idx,
        device="cpu",
        profile=ProfileArgs(**profile).for_worker(),
        threads=1,
        flush=flush,
        timer=timer,
    )


def check_and_time(worker, artifact):
    config = dict(artifact.config)
    worker.check_and_time(RunRequest(artifact, config, is_reference=True, time_it=False))
    return worker.check_and_time(RunRequest(artifact, config))


def test_the_worker_counts_the_flush_of_its_timer(built, monkeypatch):
    """A 20 ms flush and rep=10: the fewest runs, whatever the kernel's speed."""
    flushes = []

    def slow_flush(device, flush):
        def flush_once() -> None:
            flushes.append(device)
            time.sleep(0.02)

        return flush_once if flush else None

    monkeypatch.setattr(run_worker, "default_flush", slow_flush)
    worker = RunWorker()
    worker.setup(spec_for(built["ok"], flush=True, warmup=1, rep=10), reference=False)
    got = check_and_time(worker, built["ok"])
    assert got.status is TrialStatus.OK, got
    assert len(got.samples_ns) == MIN_REP_ITERS
    # the estimate's flushes (the timer's own are the native loop's)
    assert flushes == ["cpu"] * timing.ESTIMATE_CALLS


def test_a_timer_of_the_users_is_not_charged_a_flush(built, monkeypatch):
    monkeypatch.setattr(
        run_worker, "default_flush", lambda device, flush: pytest.fail("no flush to count")
    )
    counts = []

    def timer(func, args, *, warmup, rep, config, device):
        counts.append((warmup, rep))
        return [1000.0] * rep

    worker = RunWorker()
    worker.setup(spec_for(built["ok"], flush=True, timer=timer, warmup_iters=1, rep=10))
    assert check_and_time(worker, built["ok"]).status is TrialStatus.OK
    assert counts and counts[0][0] == 1


def test_a_real_flush_keeps_a_fast_kernel_to_a_few_runs(built):
    """The repro: a microsecond kernel, the 64 MiB flush, rep=10 ms. The old estimate gave
    thousands of runs (each writing 64 MiB: the config timed out); a flush of 64 MiB takes
    well over half a millisecond on any core, so at most 20 runs fill 10 ms."""
    worker = RunWorker()
    worker.setup(spec_for(built["ok"], flush=True, warmup=1, rep=10), reference=False)
    got = check_and_time(worker, built["ok"])
    assert got.status is TrialStatus.OK, got
    assert MIN_REP_ITERS <= len(got.samples_ns) <= 20, len(got.samples_ns)
