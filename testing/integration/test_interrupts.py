"""Ctrl-C and SIGTERM at each phase of a tuning: a prompt exit, no process left, a usable cache.

A child process tunes a small real space (``interrupt_child.py``) and reports each phase on a
fifo; it blocks for good at the phase under test (work in flight that never ends) or, for the
hanging config, runs a kernel that never returns within its 300 s timeout. The test reads the
phases (blocking reads, no sleeps), signals the child right after the phase, and checks:

- it exits within ``EXIT_BOUND_S``, far less than any time limit of the tuning (so it did not
  wait for the work in flight), with ``KeyboardInterrupt`` and no other traceback (SIGINT), or
  quietly by the signal (SIGTERM);
- no process it started survives (the pids it reported, its descendants at the signal, and
  anything that carries the run's mark in its environment);
- the cache is usable: ``tileauto cache verify`` passes, and where the interrupt left
  something in the cache (a staged entry, the folders of killed compiles) a second tuning of
  the same cache completes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

EXIT_BOUND_S = 20.0  # generous for a loaded machine; every time limit of the tuning is 300 s
PHASE_GUARD_S = 240.0  # only a guard against a child that never reaches its phase
CHILD = "import interrupt_child; interrupt_child.main()"


@dataclass
class Interrupted:
    """What one interrupted child did."""

    returncode: int
    exit_s: float  # from the signal to the child's exit
    stdout: str
    stderr: str
    phases: list[tuple[str, int]]
    watched: list[psutil.Process] = field(default_factory=list)


def _env(cache: Path, fifo: Path, mark: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEAUTO_")}
    env.update(
        TILEAUTO_CACHE_DIR=str(cache),
        TILEAUTO_TEST_PHASES=str(fifo),
        TILEAUTO_TEST_MARK=mark,
        TILEAUTO_COMPILE_TIMEOUT="300",
        PYTHONFAULTHANDLER="1",  # a hung child shows its stacks on SIGABRT
        PYTHONPATH=os.pathsep.join(
            [str(ROOT), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    )
    env.update(extra)
    return env


class _Phases:
    """The child's phase reports, read from a fifo (opened read-write: never an EOF)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.fd = os.open(path, os.O_RDWR)
        self.buffer = b""
        self.seen: list[tuple[str, int]] = []

    def wait_for(self, phase: str, occurrence: int, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + PHASE_GUARD_S
        while sum(p == phase for p, _ in self.seen) < occurrence:
            if proc.poll() is not None:
                raise AssertionError(f"the child exited ({proc.returncode}) before {phase}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {phase} #{occurrence} in time; seen: {self.seen}")
            # the 1 s wake-up only notices a child that died without reporting
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                self.buffer += os.read(self.fd, 65536)
                *lines, self.buffer = self.buffer.split(b"\n")
                for line in lines:
                    name, pid = line.decode().split()
                    self.seen.append((name, int(pid)))

    def close(self) -> None:
        os.close(self.fd)


def _marked(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TILEAUTO_TEST_MARK") == mark:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def interrupt(
    tmp_path: Path,
    *,
    phase: str,
    occurrence: int = 1,
    stop_at: str = "",
    space: str = "full",
    sig: int = signal.SIGINT,
    extra_env: dict[str, str] | None = None,
) -> Interrupted:
    """Run the child until ``phase`` #``occurrence``, send ``sig``, and wait for its exit."""
    mark = uuid.uuid4().hex
    phases = _Phases(tmp_path / f"phases-{mark}")
    env = _env(
        tmp_path / "cache",
        tmp_path / f"phases-{mark}",
        mark,
        TILEAUTO_TEST_STOP_AT=stop_at,
        TILEAUTO_TEST_SPACE=space,
        **(extra_env or {}),
    )
    out, err = tmp_path / f"out-{mark}", tmp_path / f"err-{mark}"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD], env=env, stdout=stdout, stderr=stderr, cwd=tmp_path
        )
    try:
        phases.wait_for(phase, occurrence, proc)
        watched = [psutil.Process(proc.pid)]
        watched += watched[0].children(recursive=True)
        watched += [psutil.Process(pid) for _, pid in phases.seen if psutil.pid_exists(pid)]
        start = time.monotonic()
        proc.send_signal(sig)
        try:
            proc.wait(timeout=EXIT_BOUND_S * 3)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        exit_s = time.monotonic() - start
        # started after the snapshot (a replacement worker, say): found by the mark
        watched += [p for p in _marked(mark) if p.pid not in {w.pid for w in watched}]
        psutil.wait_procs(_running(watched[1:]), timeout=10)  # a guard, not a delay
        return Interrupted(
            proc.returncode, exit_s, out.read_text(), err.read_text(), phases.seen, watched
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        phases.close()
        for left in _marked(mark):
            left.kill()


def _assert_clean_exit(run: Interrupted, sig: int) -> None:
    assert run.exit_s < EXIT_BOUND_S, (
        f"exit took {run.exit_s:.1f} s after the signal (it waited for work in flight?)\n"
        f"{run.stderr[-3000:]}"
    )
    if sig == signal.SIGINT:
        assert run.returncode != 0
        assert "KeyboardInterrupt" in run.stderr, run.stderr[-3000:]
        assert run.stderr.count("Traceback (most recent call last)") <= 1, run.stderr[-5000:]
        for noise in ("During handling of", "Exception ignored", "Error in atexit"):
            assert noise not in run.stderr, run.stderr[-5000:]
    else:
        assert run.returncode == -signal.SIGTERM, (run.returncode, run.stderr[-3000:])
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
    left = _running(run.watched)
    assert not left, f"processes survived: {[(p.pid, p.cmdline()) for p in left]}"


def _assert_cache_usable(tmp_path: Path, *, tune_again: bool) -> None:
    """``tileauto cache verify`` passes; with ``tune_again``, a second tuning completes."""
    cache = tmp_path / "cache"
    verify = subprocess.run(
        [sys.executable, "-m", "tileauto", "cache", "verify"],
        env=_env(cache, tmp_path / "unused", "verify"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    if not tune_again:
        return
    fifo = tmp_path / "phases-again"
    phases = _Phases(fifo)  # read by nobody: the second run only needs somewhere to write
    try:
        again = subprocess.run(
            [sys.executable, "-c", CHILD],
            env=_env(cache, fifo, uuid.uuid4().hex, TILEAUTO_TEST_SPACE="quick"),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    finally:
        phases.close()
    assert again.returncode == 0 and "done" in again.stdout, again.stderr[-3000:]


# name: (phase reported, its occurrence, where the child blocks, space)
SCENARIOS = {
    "workers-start": ("worker", 1, "worker", "full"),
    "compile": ("compile", 1, "compile", "full"),
    "supply": ("supply", 1, "supply", "full"),
    "timing": ("timing", 1, "timing", "full"),
    # runs go default, vec=4, segfault (the run worker dies), then hang in a new worker: its
    # first kernel call is the hanging config, which runs until its 300 s timeout
    "hanging-config": ("run", 2, "", "full"),
    "cache-write": ("cache", 1, "cache", "quick"),
    # TILEAUTO_WORKER_START=forkserver (as on a GPU): the server boots (seconds) right after
    # the first worker start is asked for; then compiles in its workers
    "forkserver-boot": ("starting", 1, "", "full"),
    "forkserver-compile": ("compile", 1, "compile", "full"),
}
SIGINT, SIGTERM = signal.SIGINT, signal.SIGTERM
# SIGTERM takes one path whatever the phase (kill the workers, die of the signal): a few phases
CASES = [
    *[(name, SIGINT) for name in SCENARIOS],
    *[(name, SIGTERM) for name in ("workers-start", "compile", "hanging-config", "cache-write")],
]
# a second tuning of the same cache where the interrupt left something behind in it (a
# staged entry, killed compiles' folders); `cache verify` runs after every case
TUNE_AGAIN = {("compile", SIGINT), ("hanging-config", SIGINT), ("cache-write", SIGINT)}
TUNE_AGAIN |= {("cache-write", SIGTERM)}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("scenario", "sig"), CASES, ids=[f"{n}-{signal.Signals(s).name.lower()}" for n, s in CASES]
)
def test_an_interrupt_ends_the_tuning_at_once_and_leaves_nothing(tmp_path, scenario, sig):
    phase, occurrence, stop_at, space = SCENARIOS[scenario]
    extra = {"TILEAUTO_WORKER_START": "forkserver"} if scenario.startswith("forkserver") else {}
    run = interrupt(
        tmp_path,
        phase=phase,
        occurrence=occurrence,
        stop_at=stop_at,
        space=space,
        sig=sig,
        extra_env=extra,
    )
    _assert_clean_exit(run, sig)
    _assert_cache_usable(tmp_path, tune_again=(scenario, sig) in TUNE_AGAIN)


def _measurements(cache: Path) -> dict[int, str]:
    """The stored trials of the tuned factory: their status by ``vec``."""
    records = [json.loads(p.read_text()) for p in cache.glob("measurements/*/*/*.json")]
    return {json.loads(r["config"])["vec"]: r["trial"]["status"] for r in records}


def _compiles_of_a_second_tuning(tmp_path: Path) -> list[int]:
    """Run the ``resume`` tuning to its end on the same cache; the configs its workers built."""
    fifo = tmp_path / "phases-again"
    phases = _Phases(fifo)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            env=_env(tmp_path / "cache", fifo, uuid.uuid4().hex, TILEAUTO_TEST_SPACE="resume"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "done" in out, err[-3000:]
        written = b""  # all of it is in the fifo: the run has ended
        while select.select([phases.fd], [], [], 0)[0]:
            written += os.read(phases.fd, 65536)
    finally:
        phases.close()
    reports = [line.split() for line in written.decode().splitlines()]
    # the compile workers' reports; the main process may compile a winner measured before
    return [int(pid) for name, pid in reports if name == "compile" and int(pid) != proc.pid]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_an_interrupted_tuning_keeps_what_it_measured_and_the_next_measures_the_rest(tmp_path, sig):
    # runs go default (vec=8), 4, 16, 2, 32: the signal comes while the 4th config is timed
    run = interrupt(
        tmp_path,
        phase="timing",
        occurrence=4,
        stop_at="timing",
        space="resume",
        sig=sig,
        extra_env={"TILEAUTO_TEST_STOP_COUNT": "4"},
    )
    if sig == signal.SIGINT:
        _assert_clean_exit(run, sig)
    else:
        assert run.returncode == -signal.SIGKILL, (run.returncode, run.stderr[-3000:])
    assert _measurements(tmp_path / "cache") == {8: "ok", 4: "ok", 16: "ok"}
    # the compiles the first run finished are kept in kernels/ (shared by every tuning of the
    # same configs): the second tuning compiles the others only, of the 5 configs
    kept = len(list((tmp_path / "cache" / "kernels").iterdir()))
    assert kept >= 4, kept  # at least the 4 configs timed
    built = _compiles_of_a_second_tuning(tmp_path)
    assert len(built) == 5 - kept, (built, kept)
    assert _measurements(tmp_path / "cache") == dict.fromkeys([8, 4, 16, 2, 32], "ok")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("sig", [SIGINT, SIGTERM], ids=["sigint", "sigterm"])
@pytest.mark.parametrize("scenario", ["compile", "cache-write"])
def test_an_interrupt_removes_the_runs_scratch_folders(tmp_path, scenario, sig):
    phase, occurrence, stop_at, space = SCENARIOS[scenario]
    run = interrupt(
        tmp_path, phase=phase, occurrence=occurrence, stop_at=stop_at, space=space, sig=sig
    )
    _assert_clean_exit(run, sig)
    staging = tmp_path / "cache" / "tmp"
    left = [p.name for p in staging.iterdir()] if staging.is_dir() else []
    # tune-*: the run's builds; proc-*: the process's kernels (the winner, at cache-write);
    # work-*: the workers' temp folders; stage-*: kernels being stored; .trash-*: deletes
    # under way; .probe-*: a write probe (whatever threads had in hand at the signal)
    prefixes = ("tune-", "proc-", "work-", "stage-", ".trash-", ".probe-")
    assert not [n for n in left if n.startswith(prefixes)], left
    kernels = tmp_path / "cache" / "kernels"
    staged = [p.name for p in kernels.iterdir()] if kernels.is_dir() else []
    assert not [n for n in staged if n.startswith(".stage-")], staged  # a publish cut short
