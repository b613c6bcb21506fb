"""Tests of tileauto.utils.procs.Worker: results, remote errors, timeouts, crashes, memory limit.

The first Worker of the session starts the forkserver (it imports torch and TVM, a few
seconds); later workers fork from it in milliseconds. Workers are module-scoped where a test
does not need a fresh one.
"""

from __future__ import annotations

import os
import time

import jobs
import psutil
import pytest

from tileauto.errors import WorkerError
from tileauto.utils.procs import RemoteJobError, Worker, WorkerCrashed, WorkerTimeout


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` no longer runs (absent, or a zombie waiting to be reaped)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.fixture(scope="module")
def worker():
    w = Worker("test-procs")
    yield w
    w.close()


@pytest.fixture
def fresh_worker():
    w = Worker("test-procs-fresh")
    yield w
    w.close()


def test_runs_a_function_and_returns_its_value(worker):
    assert worker.call(jobs.add, 2, 3) == 5
    assert worker.call(jobs.add, [1], [2], timeout_s=30) == [1, 2]
    assert worker.alive
    assert worker.call(jobs.pid) == worker.pid != os.getpid()


def test_worker_is_reused_between_calls(worker):
    first = worker.call(jobs.pid)
    assert worker.call(jobs.pid) == first


def test_worker_leads_its_own_process_group(worker):
    assert worker.call(jobs.process_group) == worker.pid


def test_lambdas_travel_by_value(worker):
    offset = 10
    assert worker.call(lambda x: x + offset, 5) == 15


def test_env_is_set_in_the_worker():
    w = Worker("test-procs-env", env={"TILEAUTO_TEST_WORKER_ENV": "yes"})
    try:
        assert w.call(jobs.environment, "TILEAUTO_TEST_WORKER_ENV") == "yes"
    finally:
        w.close()


def test_job_raising_comes_back_as_remote_job_error(worker):
    pid = worker.call(jobs.pid)
    with pytest.raises(RemoteJobError) as info:
        worker.call(jobs.raise_value_error, "bad tile size")
    err = info.value
    assert isinstance(err, WorkerError)
    assert err.remote.type_name == "ValueError"
    assert err.remote.message == "bad tile size"
    assert "ValueError: bad tile size" in str(err)
    assert "raise_value_error" in err.remote.traceback
    assert worker.call(jobs.pid) == pid  # an exception does not cost the worker


def test_unpicklable_result_is_an_error_not_a_hang(worker):
    with pytest.raises(RemoteJobError, match="not picklable"):
        worker.call(jobs.unpicklable_result, timeout_s=30)
    assert worker.call(jobs.add, 1, 1) == 2


def test_timeout_kills_the_worker_and_its_process_group(fresh_worker, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    worker_pid = fresh_worker.start().pid
    start = time.monotonic()
    with pytest.raises(WorkerTimeout, match="timed out after 1 s"):
        fresh_worker.call(jobs.spawn_grandchild_and_sleep, str(pid_file), 60, timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"WorkerTimeout came {elapsed:.1f} s after the call (limit 1 s)"
    grandchild = int(pid_file.read_text())
    assert _gone(worker_pid), "the worker survived its timeout"
    assert _gone(grandchild), "the job's child process (sleep 60) survived the timeout"
    assert not fresh_worker.alive


def test_worker_respawns_after_a_timeout(fresh_worker):
    with pytest.raises(WorkerTimeout):
        fresh_worker.call(jobs.sleep, 30, timeout_s=0.5)
    restarts = fresh_worker.restarts
    assert restarts >= 1
    assert fresh_worker.call(jobs.add, 20, 22, timeout_s=60) == 42
    assert fresh_worker.call(jobs.sleep, 0.01, timeout_s=60) == 0.01


def test_segfault_raises_worker_crashed_naming_the_signal(fresh_worker):
    old_pid = fresh_worker.start().pid
    with pytest.raises(WorkerCrashed) as info:
        fresh_worker.call(jobs.segfault, timeout_s=60)
    assert info.value.signal_name == "SIGSEGV"
    assert "SIGSEGV" in str(info.value)
    assert not info.value.out_of_memory
    # the worker respawns and serves the next call
    assert fresh_worker.call(jobs.add, 1, 2, timeout_s=60) == 3
    assert fresh_worker.pid != old_pid
    assert fresh_worker.restarts >= 1


def test_exit_raises_worker_crashed_naming_the_code(fresh_worker):
    with pytest.raises(WorkerCrashed, match="exited with code 3") as info:
        fresh_worker.call(jobs.exit_with, 3, timeout_s=60)
    assert info.value.signal_name is None and not info.value.out_of_memory
    assert fresh_worker.call(jobs.add, 2, 2, timeout_s=60) == 4


def test_memory_limit_kills_the_worker(tmp_path):
    probe = Worker("test-procs-mem-probe")
    try:
        baseline = probe.call(jobs.rss_bytes, timeout_s=60)
    finally:
        probe.close()
    limit = baseline + 300 * 2**20
    w = Worker("test-procs-mem", memory_limit_bytes=limit)
    try:
        start = time.monotonic()
        with pytest.raises(WorkerCrashed) as info:
            w.call(jobs.allocate_and_hold, 2**30, 30, timeout_s=60)
        assert info.value.out_of_memory is True
        assert "out of memory" in str(info.value)
        assert time.monotonic() - start < 20
        assert w.call(jobs.add, 1, 1, timeout_s=60) == 2  # and it comes back
    finally:
        w.close()


def test_memory_below_the_limit_is_fine():
    w = Worker("test-procs-mem-ok", memory_limit_bytes=None)
    try:
        assert w.memory_limit_bytes > 0
        assert w.call(jobs.allocate_and_hold, 64 * 2**20, 0.2, timeout_s=60) == 64 * 2**20
    finally:
        w.close()


def test_close_stops_the_worker():
    w = Worker("test-procs-close")
    pid = w.start().pid
    assert w.alive
    w.close()
    assert not w.alive and w.pid is None
    assert _gone(pid)


def test_kill_is_idempotent_and_start_is_lazy():
    w = Worker("test-procs-lazy")
    assert w.pid is None and not w.alive
    w.kill()  # nothing to kill
    w.close()
    assert w.call(jobs.add, 1, 2, timeout_s=60) == 3
    w.kill()
    w.kill()
    assert not w.alive


def test_two_threads_reaping_a_worker_close_its_pipe_once():
    """A cancel's kill() and a job thread that saw the worker die both reap it: no crash."""
    import threading

    entered, release = threading.Event(), threading.Event()
    closes = []

    class Proc:
        def join(self, timeout=None):
            entered.set()
            release.wait(10)

    class Conn:
        def close(self):
            closes.append(1)

    w = Worker("test-procs-reap")
    w._proc, w._conn = Proc(), Conn()
    errors = []

    def reap():
        try:
            w._reap()
        except Exception as exc:  # the bug: AttributeError: 'NoneType' ... 'close'
            errors.append(exc)

    first = threading.Thread(target=reap)
    first.start()
    assert entered.wait(10)  # the first reaper holds the handles and waits in join()
    reap()  # the second one finds nothing left to close
    release.set()
    first.join(10)
    assert not errors and closes == [1]
    assert w._proc is None and w._conn is None
