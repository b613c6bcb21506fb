"""tileauto's thread pool for CPU kernels (``src/launcher.c``, ``tileauto.jit.launcher``)."""

from __future__ import annotations

import multiprocessing
import sys
import threading
import warnings

import pytest
import torch
from busy import busy_machine

import tileauto
import tileauto.jit.thread_pool
from tileauto.jit import launcher

pytestmark = pytest.mark.skipif(
    not launcher.available() or not sys.platform.startswith("linux"),
    reason="tileauto's launcher is built on Linux only (futex); elsewhere TVM's pool runs",
)
ext = launcher._EXT


@pytest.fixture(autouse=True)
def _threads_restored():
    before = launcher.threads()
    yield
    launcher.set_threads(before or 1)


def _sum(num_task: int) -> int:
    return num_task * (num_task + 1) // 2


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("num_task", [0, 1, 2, 7])
def test_every_task_runs_once(threads, num_task):
    launcher.set_threads(threads)
    rc, total, error = ext._selftest(num_task, -1)
    tasks = num_task or (threads if threads > 1 else 1)
    assert (rc, total, error) == (0, _sum(tasks), None)


@pytest.mark.parametrize("failing", [0, 1, 4])
def test_an_error_raised_by_a_task_reaches_the_launching_thread(failing):
    launcher.set_threads(2)
    rc, total, error = ext._selftest(5, failing)
    assert rc == -1 and error == f"task {failing} failed on purpose"
    # the other thread's tasks ran (each thread stops at its own first failure)
    assert 0 < total < _sum(5)
    assert ext._selftest(5, -1) == (0, _sum(5), None), "the pool is usable after an error"


def test_many_launches_and_errors_in_a_row():
    launcher.set_threads(3)
    before = launcher.stats()["launches"]
    for i in range(3000):
        failing = 2 if i % 7 == 0 else -1
        rc, _, _ = ext._selftest(6, failing)
        assert rc == (-1 if failing >= 0 else 0)
    assert launcher.stats()["launches"] - before == 3000


def test_concurrent_launches_from_several_threads_are_all_correct():
    launcher.set_threads(2)
    results: list[tuple] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(300):
            got = ext._selftest(4, -1)
            with lock:
                results.append(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # a launch that finds the pool busy runs its tasks in its own thread: same result
    assert len(results) == 1200 and set(results) == {(0, _sum(4), None)}


def _child_launch(queue) -> None:
    queue.put(ext._selftest(4, -1))


def test_a_forked_child_makes_its_own_workers():
    launcher.set_threads(2)
    assert ext._selftest(4, -1)[0] == 0 and launcher.stats()["workers"] >= 1
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_launch, args=(queue,))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=120)
    assert child.exitcode == 0 and got == (0, _sum(4), None)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_thread_count_is_checked(bad):
    with pytest.raises(ValueError, match="num_threads"):
        launcher.set_threads(bad)


def _row_scale(rows: int, cols: int, parallel: bool = True):
    import tvm.s_tir as st
    from tvm import te

    A = te.placeholder((rows, cols), "float32", name="A")
    B = te.compute((rows, cols), lambda i, j: A[i, j] * 2.0, name="B")
    sch = st.Schedule(te.create_prim_func([A, B]))
    (i, _j) = sch.get_loops(sch.get_sblock("B"))
    if parallel:
        sch.parallel(i)
    return sch.mod["main"]


def test_a_parallel_kernel_runs_on_tileauto_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path))
    kernel = tileauto.jit(out_idx=[-1], target="llvm")(_row_scale)(64, 256)
    assert kernel.thread_pool == "tileauto"
    a = torch.randn(64, 256)
    for threads in (1, 2, 3):
        assert kernel.use_threads(threads) == threads == launcher.threads()
        before = launcher.stats()
        assert torch.equal(kernel(a), a * 2)
        after = launcher.stats()
        # one thread runs the region in the calling thread; more, on the pool's workers
        ran = "serial" if threads == 1 else "launches"
        assert after[ran] - before[ran] == 1


def test_a_kernel_without_parallel_loops_has_no_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path))
    kernel = tileauto.jit(out_idx=[-1], target="llvm")(_row_scale)(8, 16, parallel=False)
    assert kernel.thread_pool is None and kernel.num_threads is None
    assert launcher.install(kernel.artifact.lib_path) is False  # no parallel launch to point


def test_install_needs_the_library_loaded(tmp_path):
    assert ext.install(str(tmp_path / "nothing.so")) == "not-loaded"


def test_tvm_pool_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEAUTO_THREAD_POOL", "tvm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tileauto.jit(out_idx=[-1], target="llvm")(_row_scale)(32, 64)
    assert kernel.thread_pool == "tvm"
    # TVM's pool of this thread may have started smaller in an earlier test: then it says so
    for w in caught:
        assert "TVM's thread pool in this thread started smaller" in str(w.message)
    before = launcher.stats()
    a = torch.randn(32, 64)
    assert torch.equal(kernel(a), a * 2)
    after = launcher.stats()
    assert (after["launches"], after["serial"]) == (before["launches"], before["serial"])


@pytest.mark.skipif(
    tileauto.jit.thread_pool.runnable_threads() is None,
    reason="no /proc/loadavg: the busy rule cannot see the machine's load",
)
def test_the_pool_stops_spinning_on_a_busy_machine():
    """With a busy process per CPU, the rule (re-applied every 20 ms) finds the machine busy:
    its workers sleep as soon as a region ends."""
    import os

    launcher.set_threads(2)
    with busy_machine():
        start = launcher.stats()["probes"]
        while launcher.stats()["probes"] < start + 6:  # the median of 5 reads, all busy
            assert ext._selftest(2, -1)[0] == 0
        got = launcher.stats()
    assert got["busy"] == 1 and got["others"] >= (os.cpu_count() or 1)


@pytest.mark.parametrize("mode", [0, 1])
def test_a_forced_spin_mode_is_kept(mode):
    launcher.set_threads(2)
    was = launcher.stats()
    spins = (was["worker_spin_ns"], was["caller_spin_ns"], was["caller_busy_spin_ns"])
    try:
        ext.set_spin(*spins, mode)
        before = launcher.stats()["busy_launches"]
        for _ in range(50):
            assert ext._selftest(2, -1) == (0, 3, None)
        got = launcher.stats()
        assert got["busy"] == mode and got["spin_mode"] == mode
        assert got["busy_launches"] - before == (50 if mode else 0)
    finally:
        ext.set_spin(*spins, -1)
