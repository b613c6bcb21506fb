"""What a worker's death says: the last lines its job wrote, and the phase it was in.

A dead worker's :class:`WorkerCrashed` quotes the end of what the job wrote since it was sent
(the worker's log is shared by its earlier jobs and lives), bounded, and the log's path; a job
that died or hung inside :func:`job_phase` names that phase, so that the caller can blame the
user's program it was running instead of the job.
"""

from __future__ import annotations

import faulthandler
import os
import threading

import pytest

from tileauto.workers.procs import Worker, WorkerCrashed, WorkerTimeout, job_phase


# written to the descriptor, as native code (the dynamic loader) writes: Python's sys.stderr
# may be another stream in a forked worker (pytest's capture)
def say_and_exit(lines, code):
    for line in lines:
        say(line)
    os._exit(code)


def say(line):
    os.write(2, f"{line}\n".encode())


def abort_in(phase):
    faulthandler.disable()  # a forked worker's, pytest's: its report is noise here
    with job_phase(phase):
        os.abort()


def abort_after(phase):
    faulthandler.disable()
    with job_phase(phase):
        pass
    os.abort()


def hang_in(phase):
    with job_phase(phase):
        threading.Event().wait()


@pytest.fixture(params=[False, True], ids=["forkserver", "fork"])
def worker(request):
    w = Worker(f"test-output-{request.param}", fork_ok=request.param)
    yield w
    w.close()


def test_a_dead_workers_error_quotes_what_its_job_wrote(worker):
    worker.call(say, "an earlier job's chatter", timeout_s=60)
    with pytest.raises(WorkerCrashed) as info:
        worker.call(say_and_exit, ["first", "undefined symbol: my_fast_exp"], 127, timeout_s=60)
    message = str(info.value)
    assert message == (
        "worker exited with code 127; its last output: first | undefined symbol: my_fast_exp "
        f"(worker output: {worker.output_path})"
    )
    assert info.value.cause == "exit code 127" and info.value.phase is None


def test_the_quote_is_the_last_5_lines_and_at_most_1000_characters(worker):
    with pytest.raises(WorkerCrashed) as info:
        worker.call(say_and_exit, [f"line {k}" for k in range(10)], 3, timeout_s=60)
    assert "; its last output: line 5 | line 6 | line 7 | line 8 | line 9 (" in str(info.value)
    long = [f"{k:03d} " + "x" * 596 for k in range(3)]
    with pytest.raises(WorkerCrashed) as info:
        worker.call(say_and_exit, long, 3, timeout_s=60)
    quoted = info.value.output.split("; its last output: ", 1)[1].split(" (worker output: ")[0]
    assert len(quoted) == 1003 and quoted == "..." + f"{long[1]} | {long[2]}"[-1000:]
    with pytest.raises(WorkerCrashed) as info:
        worker.call(say_and_exit, [], 4, timeout_s=60)  # wrote nothing: nothing quoted
    assert str(info.value) == f"worker exited with code 4 (worker output: {worker.output_path})"


def test_the_frames_of_a_stack_are_not_quoted(worker):
    # a segfault's native stack ends in thread_run, start_thread, clone3: nothing to read
    stack = [
        "!!!!!!! Segfault encountered !!!!!!!",
        '  File "Objects/call.c", line 343, in _PyObject_Call',
        '  File "./nptl/pthread_create.c", line 442, in start_thread',
        '  File "<unknown>", line 0, in 0xffffffffffffffff',
    ]
    with pytest.raises(WorkerCrashed) as info:
        worker.call(say_and_exit, stack, 139, timeout_s=60)
    assert "; its last output: !!!!!!! Segfault encountered !!!!!!! (" in str(info.value)


def test_a_death_in_a_phase_names_it(worker):
    with pytest.raises(WorkerCrashed) as info:
        worker.call(abort_in, "manual_check_prog", timeout_s=60)
    assert info.value.phase == "manual_check_prog"
    assert info.value.signal_name == "SIGABRT" and info.value.cause == "signal SIGABRT"


def test_a_phase_that_ended_is_not_blamed(worker):
    with pytest.raises(WorkerCrashed) as info:
        worker.call(abort_after, "pre_hook", timeout_s=60)
    assert info.value.phase is None and info.value.signal_name == "SIGABRT"


def test_a_timeout_in_a_phase_names_it(worker):
    # 5 s: the job must be in its phase before the limit, also on a loaded machine
    with pytest.raises(WorkerTimeout) as info:
        worker.call(hang_in, "ref_prog", timeout_s=5)
    assert info.value.phase == "ref_prog"
    assert worker.call(say, "alive again", timeout_s=60) is None  # a new worker


def test_a_phase_outside_a_worker_just_runs():
    with job_phase("manual_check_prog"):
        ran = True
    assert ran
