"""Timings taken while other processes held the cores are noted, and the tuning says so.

The run worker sums the time its threads spent runnable but waiting for a CPU
(``/proc/self/task/*/schedstat``) over each config's timing: quiet, a 2-thread GEMM's threads
wait 0-3% of the time on this project's machines; with two busy processes on its 2 cores,
185%. A quarter or more gets the trial a note, and the tuning a warning.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import BUSY_NOTE, RunOutcome, TrialStatus
from tileauto.run._busy import busy_note, runqueue_wait_s
from tileauto.settings import Settings
from tileauto.testing import RecordingReporter, ScriptedBuilder, ScriptedRunner
from tileauto.tune.problem import TuningProblem
from tileauto.tune.session import TuningSession

needs_schedstat = pytest.mark.skipif(
    runqueue_wait_s() is None,
    reason="this kernel does not report run-queue waits (/proc/self/task/*/schedstat)",
)


@needs_schedstat
def test_a_timing_that_shared_its_cpu_with_a_busy_process_gets_the_note():
    cpu = min(os.sched_getaffinity(0))
    spin = (
        f"import os, sys\nos.sched_setaffinity(0, {{{cpu}}})\n"
        "sys.stdout.write('x'); sys.stdout.flush()\nwhile True:\n    pass\n"
    )
    busy = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    allowed = os.sched_getaffinity(0)
    try:
        assert busy.stdout is not None and busy.stdout.read(1) == b"x"  # it spins there now
        os.sched_setaffinity(0, {cpu})  # this thread, on the same CPU: it gets about half
        before, start = runqueue_wait_s(), time.perf_counter()
        while time.perf_counter() - start < 0.3:
            pass
        note = busy_note(before, time.perf_counter() - start)
    finally:
        os.sched_setaffinity(0, allowed)
        busy.kill()
        busy.wait()
    assert note is not None and note.startswith(BUSY_NOTE), note
    assert "waited" in note and "ms for a CPU" in note


def test_no_note_without_the_kernel_s_figures_or_for_a_timing_too_short_to_judge():
    assert busy_note(None, 1.0) is None
    assert busy_note(0.0, 0.001) is None  # 1 ms: too short to judge


def test_a_tuning_with_busy_timings_warns_and_keeps_the_notes(tmp_path):
    def factory(n, block=32):  # never called: the builder is scripted
        raise AssertionError

    class BusyRunner(ScriptedRunner):
        def run(self, artifact, config, *, is_reference, time_it=True):
            got = super().run(artifact, config, is_reference=is_reference, time_it=time_it)
            note = f"{BUSY_NOTE}: its threads waited 90 ms for a CPU during 100 ms of timing"
            return RunOutcome(**{**got.__dict__, "notes": (*got.notes, note)})

    problem = TuningProblem(
        factory=factory,
        args=(256,),
        kwargs={},
        configs=[{"block": 16}, {"block": 64}],
        compile_args=CompileArgs(),
        profile_args=ProfileArgs(),
        settings=Settings.from_env({"TILEAUTO_CACHE_DIR": str(tmp_path / "cache")}),
        verbose=False,
        name="k",
    )
    session = TuningSession(
        problem,
        builder=ScriptedBuilder(),
        runner=BusyRunner(lambda c: float(c["block"])),
        reporter=RecordingReporter(),
    )
    with pytest.warns(RuntimeWarning, match="2 of 2 configs were timed on a busy machine") as got:
        result = session.run()
    assert all(any(n.startswith(BUSY_NOTE) for n in t.notes) for t in result.trials)
    assert all(t.status is TrialStatus.OK for t in result.trials)
    said = [str(w.message) for w in got if BUSY_NOTE in str(w.message)]
    assert len(said) == 1 and "num_threads=1" in said[0], said


def test_the_busy_warning_of_a_gpu_tuning_gives_the_gpu_s_advice():
    from tileauto.records import LatencyStats, Trial
    from tileauto.tune._trials import warn_if_busy

    note = f"{BUSY_NOTE}: its threads waited 90 ms for a CPU during 100 ms of timing"
    stats = LatencyStats(1.0, 1.0, 1.0, 1.0, 1.0, 3)
    timed = [
        Trial(0, {}, TrialStatus.OK, stats, notes=(note,)),
        Trial(1, {}, TrialStatus.OK, stats),
    ]
    with pytest.warns(RuntimeWarning, match="1 of 2 configs were timed on a busy machine") as got:
        warn_if_busy("k", timed, "cuda")
    (said,) = [str(w.message) for w in got]
    assert "TILEAUTO_AUTO_TUNING_CPU_COUNTS" in said and "num_threads" not in said
