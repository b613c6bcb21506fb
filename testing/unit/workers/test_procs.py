"""Tests of tileauto.workers.procs.Worker: results, remote errors, timeouts, crashes, memory limit,
kills from another thread (cancels), and the process-wide safety net (exit, SIGTERM).

The first Worker of the session starts the forkserver (it imports torch and TVM, a few
seconds); later workers fork from it in milliseconds. Workers are module-scoped where a test
does not need a fresh one. A job caught in the act reports on a fifo first; the test reads the
report (a blocking read, bounded only as a guard) before it acts.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jobs
import psutil
import pytest

from tileauto.cache.hygiene import worker_log_name
from tileauto.errors import WorkerError
from tileauto.utils.threads import background_thread, signals_to_main_thread
from tileauto.workers.procs import (
    RemoteJobError,
    Worker,
    WorkerCancelled,
    WorkerCrashed,
    WorkerTimeout,
)

GUARD_S = 60.0  # only against a hang
REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


def _gone(pid: int, within_s: float = GUARD_S) -> bool:
    """True once ``pid`` no longer runs (absent, or a zombie waiting to be reaped)."""
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout=within_s)  # returns as soon as it ends
        return True
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return proc.status() == psutil.STATUS_ZOMBIE


class Reports:
    """Lines ``<word> <pid>`` written by jobs to a fifo (opened read-write: never an EOF)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = str(path)
        self.fd = os.open(path, os.O_RDWR)
        self.buffer = b""

    def next(self) -> tuple[str, int]:
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.fd], [], [], GUARD_S)
            assert ready, "no report from the job"
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


def _call_in_thread(worker: Worker, *args, **kwargs):
    """``worker.call`` in a thread; returns (thread, list receiving ("ok"|"raised", value))."""
    out: list = []

    def call():
        try:
            out.append(("ok", worker.call(*args, **kwargs)))
        except BaseException as exc:  # noqa: BLE001
            out.append(("raised", exc))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, out


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


def test_a_worker_log_that_cannot_be_written_leaves_the_output_to_stderr(tmp_path, monkeypatch):
    # a read-only cache whose logs/workers/ exists: every worker died opening its log. As
    # root no mode stops a write, so a folder sits where the log file would be.
    monkeypatch.setenv("TILEAUTO_LOG_DIR", str(tmp_path))
    (tmp_path / "workers" / worker_log_name("test-procs-ro", os.getpid())).mkdir(parents=True)
    w = Worker("test-procs-ro", env={"TILEAUTO_TEST_WORKER_ENV": "yes"})
    try:
        assert w.call(jobs.environment, "TILEAUTO_TEST_WORKER_ENV") == "yes"
        assert w.output_path is None
    finally:
        w.close()


def test_forkserver_workers_ask_torch_for_a_gpu_without_initializing_cuda(worker):
    """torch's default GPU check initializes the CUDA driver, which a forked child cannot use:
    on a GPU machine every CUDA compile in a worker failed until the server checked with NVML."""
    assert worker.call(jobs.environment, "PYTORCH_NVML_BASED_CUDA_CHECK") == "1"
    assert worker.start_method == "forkserver"


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
    # 5 s: the job must have started its child and written the pid before the limit, also on
    # a loaded machine (a 1 s limit raced with it there)
    with pytest.raises(WorkerTimeout, match="timed out after 5 s"):
        fresh_worker.call(jobs.spawn_grandchild_and_sleep, str(pid_file), 60, timeout_s=5.0)
    elapsed = time.monotonic() - start
    assert elapsed < 30, f"WorkerTimeout came {elapsed:.1f} s after the call (limit 5 s)"
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


# -- kills from another thread (a cancel) --------------------------------------------------------
def test_a_kill_from_another_thread_cancels_the_job_at_once(fresh_worker, reports):
    thread, out = _call_in_thread(fresh_worker, jobs.say_and_sleep, reports.path, 3600)
    _, pid = reports.next()
    fresh_worker.kill()
    thread.join(GUARD_S)
    assert not thread.is_alive(), "the job's thread waited for the job"
    kind, error = out[0]
    assert kind == "raised" and isinstance(error, WorkerCancelled), out
    assert _gone(pid)
    assert not fresh_worker.alive and fresh_worker.pid is None
    assert fresh_worker.call(jobs.add, 2, 2, timeout_s=60) == 4  # and it comes back


def test_a_cancel_event_stops_the_job_and_a_set_one_starts_nothing(fresh_worker, reports):
    cancel = threading.Event()
    thread, out = _call_in_thread(
        fresh_worker, jobs.say_and_sleep, reports.path, 3600, cancel=cancel
    )
    _, pid = reports.next()
    cancel.set()
    thread.join(GUARD_S)
    assert isinstance(out[0][1], WorkerCancelled)
    assert _gone(pid)
    with pytest.raises(WorkerCancelled, match="before it started"):
        fresh_worker.call(jobs.add, 1, 1, cancel=cancel)
    assert fresh_worker.pid is None  # nothing was started for it


def test_close_kills_a_worker_whose_job_runs_in_another_thread(fresh_worker, reports):
    thread, out = _call_in_thread(fresh_worker, jobs.spawn_grandchild_and_say, reports.path, 3600)
    word, pid = reports.next()
    grandchild = int(word.split("-")[1])
    fresh_worker.close()
    thread.join(GUARD_S)
    assert isinstance(out[0][1], WorkerCancelled)
    assert _gone(pid) and _gone(grandchild)


def test_ctrl_c_in_the_caller_kills_the_worker_of_the_job_in_flight(fresh_worker, reports):
    """Nobody waits for that job's answer any more; left running, it would answer the next."""

    def interrupt_when_started():
        reports.next()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    helper = threading.Thread(target=interrupt_when_started, daemon=True)
    helper.start()
    pid = fresh_worker.start().pid
    with pytest.raises(KeyboardInterrupt):
        fresh_worker.call(jobs.say_and_sleep, reports.path, 3600)
    helper.join(GUARD_S)
    assert _gone(pid)
    assert fresh_worker.call(jobs.add, 3, 4, timeout_s=60) == 7


def test_tileauto_threads_leave_ctrl_c_to_the_main_thread():
    """Python handles signals in the main thread only; a thread that took SIGINT from the
    kernel would leave a main thread asleep in a lock wait unaware of it."""
    seen = {}

    def look(key):
        seen[key] = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])

    def in_a_thread():
        look("before")
        with signals_to_main_thread():
            look("inside")
        look("after")

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join(GUARD_S)
    background_thread(look, "background", name="test-background").join(GUARD_S)
    with signals_to_main_thread():  # the main thread keeps them: it is the one that handles them
        look("main")
    assert seen == {
        "before": False,
        "inside": True,
        "after": False,
        "background": True,
        "main": False,
    }


# -- a compile worker's own temp folder ----------------------------------------------------------
@pytest.fixture
def own_tmp_worker():
    w = Worker("test-procs-own-tmp", own_tmp=True)
    yield w
    w.close()


def test_a_killed_job_leaves_nothing_in_the_temp_folder(own_tmp_worker, reports, tmp_path):
    """A compile killed half-way left TVM's ``/tmp/tmpXXXX/lib0.o`` and g++'s ``/tmp/cc*``
    behind; in a worker's own temp folder they go with the worker."""
    record = tmp_path / "made.txt"
    cancel = threading.Event()
    thread, out = _call_in_thread(
        own_tmp_worker,
        jobs.leave_temp_files_and_say,
        reports.path,
        str(record),
        3600,
        cancel=cancel,
    )
    reports.next()
    own = own_tmp_worker._tmp.path
    made = [Path(line) for line in record.read_text().split()]
    assert len(made) == 2 and all(path.exists() for path in made)
    assert all(path.parent == own for path in made), (made, own)
    cancel.set()
    thread.join(GUARD_S)
    assert isinstance(out[0][1], WorkerCancelled), out
    assert not own.exists() and not any(path.exists() for path in made)
    # the worker that replaces it has a folder of its own
    gettempdir, tmpdir, _, _ = own_tmp_worker.call(jobs.temp_folders, timeout_s=60)
    assert gettempdir == tmpdir == str(own_tmp_worker._tmp.path) != str(own)
    own_tmp_worker.close()
    assert own_tmp_worker._tmp is None and not Path(gettempdir).exists()


def test_a_workers_shared_folders_are_its_callers(own_tmp_worker):
    """The fallback lock folder must be the same in every process of this user (else the
    locks exclude nothing): a worker's own temp folder does not move it."""
    import tempfile

    from tileauto.cache.folders import private_fallback_dir

    own, _, shared, locks = own_tmp_worker.call(jobs.temp_folders, timeout_s=60)
    assert own != tempfile.gettempdir()
    assert shared == tempfile.gettempdir()
    assert locks == str(private_fallback_dir("locks"))


def test_other_workers_keep_the_system_temp_folder(worker):
    """A run worker runs the user's reference, perhaps ``torch.compile``d: torch keeps its
    compile cache in the temp folder (``torchinductor_<user>``), which must outlive it."""
    import tempfile

    gettempdir, _, shared, _ = worker.call(jobs.temp_folders, timeout_s=60)
    assert gettempdir == shared == tempfile.gettempdir() and worker._tmp is None


def test_temp_folders_of_a_killed_caller_are_removed_by_the_next(tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    monkeypatch.setenv("TILEAUTO_TMP_DIR", str(staging))
    # a caller killed with SIGKILL removes nothing: its claimed folder stays, unlocked
    code = "from tileauto.cache.scratch import claim_scratch_dir as c; import sys; print(c(sys.argv[1], 'work').path)"
    orphan = Path(
        subprocess.run(
            [sys.executable, "-c", code, str(staging)], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    (orphan / "lib0.o").write_bytes(b"\0" * 4096)
    mine = Worker("test-procs-orphans", own_tmp=True)
    try:
        mine.start()
        assert not orphan.exists()
        assert mine._tmp.path.parent == staging and mine._tmp.path.exists()
    finally:
        mine.close()
    assert list(staging.glob("work-*")) == []


# -- the forkserver and the safety net -----------------------------------------------------------
def _script(body: str, tmp_path: Path, **env: str) -> subprocess.Popen:
    """A fresh interpreter running ``body`` (a main script without a ``__main__`` guard)."""
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(body))
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)])
    return subprocess.Popen(
        [sys.executable, str(script)],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )


def test_a_forkserver_worker_does_not_run_the_callers_main_script(tmp_path):
    proc = _script(
        """
        import os
        import jobs
        from tileauto.workers.procs import Worker
        from tileauto.utils.threads import background_thread

        with open("imports.txt", "a") as f:  # runs each time this script is imported
            f.write(f"{os.getpid()}\\n")
        w = Worker("no-main")
        # started from a thread that blocks SIGINT and SIGTERM: the worker must not inherit it
        background_thread(w.start, name="starter").join()
        print(w.call(jobs.pid, timeout_s=60), w.start_method, flush=True)
        print(w.call(jobs.blocked_signals, timeout_s=60), flush=True)
        w.close()
        """,
        tmp_path,
    )
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    first, blocked = out.splitlines()
    worker_pid, method = first.split()
    assert blocked == "[]"
    assert method == "forkserver"
    assert (tmp_path / "imports.txt").read_text().split() == [str(proc.pid)]
    assert worker_pid != str(proc.pid)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_no_worker_or_job_child_outlives_its_caller(tmp_path, reports, how):
    """SIGTERM: the safety net kills workers and their jobs' children, and the process dies of
    the signal, quietly. SIGKILL: no cleanup runs; the workers die with the caller."""
    proc = _script(
        f"""
        import threading
        import jobs
        from tileauto.workers.procs import Worker
        from tileauto.workers.safety import kill_workers_on_sigterm
        from tileauto.workers.forkserver import ForkServer

        w = Worker("doomed")
        with kill_workers_on_sigterm():
            w.start()
            jobs.say({reports.path!r}, f"server-{{ForkServer.shared().pid}}")
            w.call(jobs.spawn_grandchild_and_say, {reports.path!r}, 3600)
        """,
        tmp_path,
    )
    try:
        server = int(reports.next()[0].split("-")[1])
        word, worker = reports.next()
        grandchild = int(word.split("-")[1])
        proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        _, err = proc.communicate(timeout=GUARD_S)
    finally:
        proc.kill()
    if how == "sigterm":
        assert proc.returncode == -signal.SIGTERM and "Traceback" not in err, err
        assert _gone(grandchild), "the job's child survived a SIGTERM of the caller"
    else:
        psutil.Process(grandchild).kill()  # no cleanup after a SIGKILL: only the workers die
    assert _gone(worker) and _gone(server)


def test_a_programs_own_fork_leaves_its_parents_workers_alone(tmp_path):
    """A child the program forks (not a worker) exits through ``atexit``: it killed its
    parent's workers and forkserver, whose next job then paid for new ones. And the workers'
    temp folders go at the caller's exit."""
    proc = _script(
        """
        import os
        import jobs
        from tileauto.workers.forkserver import ForkServer
        from tileauto.workers.procs import Worker

        w = Worker("forked-over", own_tmp=True)
        before = w.call(jobs.pid, timeout_s=60)
        server = ForkServer.shared().pid
        print(w._tmp.path, flush=True)
        child = os.fork()
        if child == 0:
            raise SystemExit(0)  # a normal exit: atexit runs
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print(w.alive, w.call(jobs.pid, timeout_s=60) == before, flush=True)
        print(ForkServer.shared().pid == server, w.restarts, flush=True)
        """,
        tmp_path,
    )
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    folder, alive, server = out.splitlines()
    assert alive == "True True", "the child's exit killed the parent's worker"
    assert server == "True 0", "the child's exit killed the parent's forkserver"
    assert not Path(folder).exists(), "the worker's temp folder outlived its caller"


def test_a_forkserver_whose_caller_is_gone_ends_while_it_preloads(tmp_path, reports):
    """A caller that dies while its ``Popen`` of the server is under way (a Ctrl-C as the first
    worker starts) never learns the server's pid to kill it: the server ends itself when its
    caller hangs up, without waiting for its imports (torch and TVM: a minute on a loaded
    machine) to finish. Here the preload never finishes."""
    (tmp_path / "endless_preload.py").write_text(
        f"import jobs, threading\njobs.say({reports.path!r}, 'preloading')\n"
        "threading.Event().wait()\n"
    )
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, "-m", "tileauto.workers.entry", str(theirs.fileno())],
        pass_fds=[theirs.fileno()],
        env=env,
    )
    theirs.close()
    try:
        config = {
            "sys_path": [str(tmp_path), str(HERE), *sys.path],
            "preload": ["endless_preload"],
            "pythonpath": None,
        }
        ours.send(pickle.dumps(config))
        assert reports.next() == ("preloading", server.pid)
        ours.close()  # the caller is gone
        server.wait(timeout=GUARD_S)
    finally:
        server.kill()
        server.wait()
    assert server.returncode == 0
