"""Tests of tileauto.build.builder.Builder: statuses, index-aligned results, and cancels scoped to one
build (a worker pool shared by two builders, a cancel that kills only its own compiles).

Factories that must be caught in the act report on a fifo (its path is their argument) and
then block; the test reads the report (a blocking read, bounded only as a guard against a
hang) before it cancels or interrupts. Workers come from the forkserver (booted once).
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from tileauto.build.builder import Builder, BuildRequest, BuildResult, BuildStatus
from tileauto.options import CompileArgs
from tileauto.workers.pool import WorkerPool
from tileauto.build.job import build_all

GUARD_S = 60.0  # only against a hang: every wait below ends on an event well before
LLVM = CompileArgs(target="llvm", out_idx=(-1,))


# -- factories (run inside the compile workers) ------------------------------------------------
def _say(fifo: str, word: str) -> None:
    fd = os.open(fifo, os.O_WRONLY)
    try:
        os.write(fd, f"{word} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def scale(n: int, vec: int = 8, fail: bool = False):
    """B = A * 2, vectorized by ``vec``; ``fail`` raises as a bad schedule does."""
    from tvm import s_tir, te

    if fail:
        raise RuntimeError("this config cannot be scheduled (deliberate)")
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    _, inner = sch.split(sch.get_loops(sch.get_sblock("B"))[0], [None, vec])
    sch.vectorize(inner)
    return sch.mod["main"]


def block_forever(fifo: str):
    _say(fifo, "started")
    time.sleep(3600)


def raise_when_released(fifo: str, release: str):
    """Reports, waits until the test writes to ``release``, then fails as a compile error."""
    _say(fifo, "started")
    fd = os.open(release, os.O_RDONLY)
    try:
        os.read(fd, 1)
    finally:
        os.close(fd)
    raise ValueError("released")


def allocate(n_bytes: int, fifo: str):
    block = bytearray(b"\x01") * n_bytes  # every page touched
    _say(fifo, "allocated")
    time.sleep(3600)
    return block


def raise_memory_error():
    raise MemoryError("cannot allocate the tile buffers")


def kill_me(sig: int):
    os.kill(os.getpid(), sig)
    time.sleep(3600)


# -- helpers -----------------------------------------------------------------------------------
class Reports:
    """Lines ``<word> <pid>`` from the factories, through a fifo (opened read-write)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = str(path)
        self.fd = os.open(path, os.O_RDWR)
        self.buffer = b""

    def next(self) -> tuple[str, int]:
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.fd], [], [], GUARD_S)
            assert ready, "no report from the compile worker"
            self.buffer += os.read(self.fd, 4096)
        line, self.buffer = self.buffer.split(b"\n", 1)
        word, pid = line.decode().split()
        return word, int(pid)

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def reports(tmp_path):
    r = Reports(tmp_path / "reports")
    yield r
    r.close()


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("test-builder")
    yield p
    p.close()


def builder(factory, pool, tmp_path, workers=1, **kwargs) -> Builder:
    return Builder(
        factory, LLVM, workers=workers, staging_dir=tmp_path / "staging", pool=pool, **kwargs
    )


def build_in_thread(b: Builder, requests: list[BuildRequest]):
    """Run ``b.build`` in a thread; returns (thread, a list that receives its results)."""
    out: list[list[BuildResult]] = []
    thread = threading.Thread(target=lambda: out.append(build_all(b, requests)), daemon=True)
    thread.start()
    return thread, out


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting to be reaped counts as ended)."""
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout=GUARD_S)  # returns as soon as it dies; the bound is a guard
        return True
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return proc.status() == psutil.STATUS_ZOMBIE


# -- builds ------------------------------------------------------------------------------------
def test_start_and_close_fork_the_workers_and_release_them(tmp_path):
    own = WorkerPool("test-builder-fork")
    b = builder(scale, own, tmp_path, workers=2)
    before = signal.getsignal(signal.SIGTERM)  # another library's handler is left alone
    try:
        forked = b.start_workers()
        if not forked:
            pytest.skip(f"cannot fork here: {b.fork_unsafe_reason()}")
        assert [w.start_method for w in own.workers] == ["fork", "fork"]
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # workers die first
        results = build_all(b, [BuildRequest(0, {"vec": 4}, (256,))])
        assert results[0].ok
        b.close()
        assert not any(w.alive for w in own.workers)
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        b.close()
        own.close()


def test_results_are_index_aligned_with_a_status_each(pool, tmp_path):
    requests = [
        BuildRequest(index=0, config={"vec": 4}, args=(256,)),
        BuildRequest(index=1, config={"fail": True}, args=(256,)),
        BuildRequest(index=2, config={"vec": 16}, args=(256,)),
    ]
    seen: list[int] = []
    results = build_all(
        builder(scale, pool, tmp_path, workers=2),
        requests,
        on_result=lambda r: seen.append(r.index),
    )
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.status for r in results] == [BuildStatus.OK, BuildStatus.ERROR, BuildStatus.OK]
    assert "deliberate" in results[1].error
    assert results[0].artifact is not None and Path(results[0].artifact.directory).is_dir()
    assert sorted(seen) == [0, 1, 2]
    assert all(not w.busy for w in pool.workers)  # every lease was given back


def test_an_empty_build_returns_nothing(pool, tmp_path):
    assert build_all(builder(scale, pool, tmp_path), []) == []


def test_thread_isolation_builds_in_this_process(tmp_path):
    b = Builder(scale, LLVM, workers=2, isolation="thread", staging_dir=tmp_path)
    results = build_all(
        b, [BuildRequest(0, {"vec": 4}, (256,)), BuildRequest(1, {"fail": True}, (8,))]
    )
    assert [r.status for r in results] == [BuildStatus.OK, BuildStatus.ERROR]


# -- out of memory: never a permanent crash ------------------------------------------------------
def test_a_compile_past_the_memory_limit_is_out_of_memory(tmp_path, reports):
    limited = WorkerPool("test-builder-mem", memory_limit_bytes=256 * 2**20)
    try:
        request = BuildRequest(0, {}, (1 << 30, reports.path))
        (result,) = build_all(builder(allocate, limited, tmp_path), [request])
    finally:
        limited.close()
    assert result.status is BuildStatus.OUT_OF_MEMORY
    assert "out of memory" in result.error and "256.0 MiB" in result.error


def test_a_compiler_killed_by_sigkill_is_out_of_memory_and_a_segfault_a_crash(pool, tmp_path):
    # nobody in tileauto sent that SIGKILL: the kernel's out-of-memory killer is the usual one
    requests = [
        BuildRequest(0, {}, (int(signal.SIGKILL),)),
        BuildRequest(1, {}, (int(signal.SIGSEGV),)),
    ]
    results = build_all(builder(kill_me, pool, tmp_path), requests)
    assert [r.status for r in results] == [BuildStatus.OUT_OF_MEMORY, BuildStatus.CRASH]
    assert "SIGKILL" in results[0].error and "SIGSEGV" in results[1].error


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_a_memory_error_in_the_compile_is_out_of_memory(pool, tmp_path, isolation):
    b = builder(raise_memory_error, pool, tmp_path, isolation=isolation)
    (result,) = build_all(b, [BuildRequest(0, {})])
    assert result.status is BuildStatus.OUT_OF_MEMORY
    assert "MemoryError: cannot allocate" in result.error


# -- cancel: this build's compiles only ----------------------------------------------------------
def test_cancel_kills_the_running_compile_and_reports_it_cancelled(pool, tmp_path, reports):
    b = builder(block_forever, pool, tmp_path, workers=2)
    requests = [BuildRequest(i, {}, (reports.path,)) for i in range(3)]
    thread, out = build_in_thread(b, requests)
    _, first = reports.next()
    _, second = reports.next()  # both workers are compiling; the third request waits
    b.cancel()
    thread.join(GUARD_S)
    assert not thread.is_alive(), "build() waited for the compiles in flight"
    (results,) = out
    assert [r.index for r in results] == [0, 1, 2]
    assert {r.status for r in results} == {BuildStatus.CANCELLED}
    assert gone(first) and gone(second)
    # a cancelled builder starts nothing more
    assert [r.status for r in build_all(b, requests[:1])] == [BuildStatus.CANCELLED]


def test_cancel_leaves_another_builders_compiles_alone(pool, tmp_path, reports):
    release = tmp_path / "release"
    os.mkfifo(release)
    patient = builder(raise_when_released, pool, tmp_path / "a")
    doomed = builder(block_forever, pool, tmp_path / "b")
    kept_thread, kept = build_in_thread(
        patient, [BuildRequest(0, {}, (reports.path, str(release)))]
    )
    _, kept_pid = reports.next()
    doomed_thread, cancelled = build_in_thread(doomed, [BuildRequest(0, {}, (reports.path,))])
    _, doomed_pid = reports.next()
    assert kept_pid != doomed_pid  # the two builds were lent different workers of the pool
    doomed.cancel()
    doomed_thread.join(GUARD_S)
    assert cancelled[0][0].status is BuildStatus.CANCELLED
    assert gone(doomed_pid)
    assert psutil.pid_exists(kept_pid)
    fd = os.open(release, os.O_WRONLY)  # the other build's compile goes on, to its own end
    os.write(fd, b"x")
    os.close(fd)
    kept_thread.join(GUARD_S)
    (result,) = kept[0]
    assert result.status is BuildStatus.ERROR and "released" in result.error


def test_an_interrupted_build_kills_its_compiles(pool, tmp_path, reports):
    b = builder(block_forever, pool, tmp_path)
    started: list[int] = []

    def interrupt_when_started():
        started.append(reports.next()[1])
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    helper = threading.Thread(target=interrupt_when_started, daemon=True)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        build_all(b, [BuildRequest(0, {}, (reports.path,))])
    helper.join(GUARD_S)
    assert started and gone(started[0])
