"""tileauto.cache.scratch and .hygiene: leftovers of killed runs, claims of live ones, pruned logs.

Live and dead runs are real processes: a child claims a scratch folder and reports it on its
stdout, then waits for its stdin (alive) or is killed with SIGKILL (dead). Ages are set with
``os.utime`` and the ``now`` argument, never waited for.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tileauto.cache import disk, folders, hygiene, scratch
from tileauto.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import sys
from pathlib import Path
from tileauto.cache import scratch
claim = scratch.claim_scratch_dir(Path(sys.argv[1]), sys.argv[2])
(claim.path / "build-0").mkdir()
(claim.path / "build-0" / "kernel.so").write_bytes(b"x" * 5000)
print(claim.path, flush=True)
sys.stdin.readline()
"""
DAY = 86400.0


class Claimant:
    """A child process that claimed a scratch folder; alive until :meth:`kill`."""

    def __init__(self, staging: Path, prefix: str = "tune") -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(staging), prefix],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline().strip()
        assert line, "the child did not claim a folder"
        self.path = Path(line)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stdin.close()

    def finish(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()


@pytest.fixture
def staging(tmp_path):
    return folders.make_private_dir(tmp_path / "tmp")


def no_such_pid() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything in it look last changed ``seconds`` ago."""
    when = time.time() - seconds
    for p in [*path.rglob("*"), path] if path.is_dir() else [path]:
        os.utime(p, (when, when), follow_symlinks=False)


def names(cleanup: scratch.Cleanup) -> set[str]:
    return {item.path.name for item in cleanup.removed}


def claimed(staging: Path, pid: int, kind: str = "tune", hexid: str = "0123456789ab", **record):
    """A folder as claim_scratch_dir makes it for process ``pid``, its claim not locked."""
    folder = staging / f"{kind}-{pid}-{hexid}"
    (folder / "build-1").mkdir(parents=True)
    (folder / "build-1" / "lib.so").write_bytes(b"y" * 100)
    fields = {"tileauto": scratch.MARK, "pid": pid, "host": socket.gethostname(), "time": 0.0}
    (folder / scratch.OWNER).write_text(json.dumps({**fields, **record}))
    return folder


# -- claims and leftovers ----------------------------------------------------------------------
def test_a_claimed_folder_is_named_by_pid_and_holds_the_claim(staging):
    with scratch.claim_scratch_dir(staging, "tune") as claim:
        assert claim.path.parent == staging
        assert claim.path.name.startswith(f"tune-{os.getpid()}-")
        record = json.loads((claim.path / scratch.OWNER).read_text())
        assert record["pid"] == os.getpid()
        assert (claim.path.stat().st_mode & 0o777) == 0o700
        # another descriptor, even in this process, finds the folder in use
        cleanup = scratch.remove_leftovers(staging)
        assert cleanup.removed == () and cleanup.in_use == (claim.path,)
    assert not claim.path.exists()


def test_a_killed_runs_folder_goes_and_a_live_runs_folder_stays(staging):
    live, dead = Claimant(staging, "tune"), Claimant(staging, "proc")
    try:
        dead.kill()
        cleanup = scratch.remove_leftovers(staging)
        assert cleanup.in_use == (live.path,)
        (item,) = cleanup.removed
        assert item.path == dead.path and item.size_bytes >= 5000
        assert f"pid {dead.proc.pid}" in item.why and "ended" in item.why
        assert not dead.path.exists() and (live.path / "build-0" / "kernel.so").is_file()
        assert sorted(p.name for p in staging.iterdir()) == [live.path.name]  # no trash left
    finally:
        live.finish()
    # the live run ended without removing its folder (a bug, or killed right now): it goes next
    assert names(scratch.remove_leftovers(staging)) == {live.path.name}


def test_dry_run_decides_the_same_and_removes_nothing(staging):
    dead = Claimant(staging)
    dead.kill()
    stale = staging / "stage-0123456789ab"
    stale.mkdir()
    age(stale, 2 * disk.STALE_S)
    cleanup = scratch.remove_leftovers(staging, dry_run=True)
    assert names(cleanup) == {dead.path.name, stale.name}
    assert dead.path.is_dir() and stale.is_dir()
    assert names(scratch.remove_leftovers(staging)) == {dead.path.name, stale.name}
    assert list(staging.iterdir()) == []


def test_a_forked_child_keeps_the_claim_alive(staging):
    claim = scratch.claim_scratch_dir(staging, "tune")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child inherits the locked descriptor, like a forked worker
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        claim.release()  # the parent lets go; the child still holds the folder
        assert scratch.remove_leftovers(staging).in_use == (claim.path,)
    finally:
        os.close(write)
        os.waitpid(pid, 0)
    assert names(scratch.remove_leftovers(staging)) == {claim.path.name}


def test_a_claimant_that_meets_a_cleaner_makes_another_folder(staging, monkeypatch):
    real_lock, lost = scratch._lock, []

    def cleaner_first(fd, *, blocking):
        if not lost:  # a cleaner took the lock first and renamed the new folder away
            (folder,) = [p for p in staging.iterdir() if p.name.startswith("tune-")]
            folder.rename(staging / ".trash-0000")
            lost.append(folder)
        return real_lock(fd, blocking=blocking)

    monkeypatch.setattr(scratch, "_lock", cleaner_first)
    claim = scratch.claim_scratch_dir(staging, "tune")
    assert lost and claim.path != lost[0] and claim.path.is_dir()
    assert json.loads((claim.path / scratch.OWNER).read_text())["pid"] == os.getpid()
    monkeypatch.setattr(scratch, "_lock", real_lock)
    assert scratch.remove_leftovers(staging).in_use == (claim.path,)
    claim.remove()


def test_without_flock_claimed_folders_go_by_age_and_process(staging, monkeypatch):
    # a file system with no flock: a claim is judged by the newest change inside the folder
    # and the pid of its claim record (was: any folder named like one, claim or none)
    monkeypatch.setattr(scratch, "_lock", lambda fd, *, blocking: None)
    started = psutil.Process().create_time()
    dead = no_such_pid()
    fresh = claimed(staging, dead, hexid="aaaaaaaaaaaa")
    old = claimed(staging, dead, hexid="bbbbbbbbbbbb")
    reused = claimed(staging, os.getpid(), "proc")  # this pid, but before it started
    running = claimed(staging, os.getpid(), "work")  # this pid, since it started
    old_touched = claimed(staging, dead, hexid="cccccccccccc")
    elsewhere = claimed(staging, dead, "run", host=f"not-{socket.gethostname()}")
    for folder in (old, old_touched, elsewhere):
        age(folder, 2 * disk.STALE_S)
    age(reused, time.time() - started + 2 * disk.STALE_S)
    os.utime(old_touched / "build-1" / "lib.so")  # written just now, deep inside
    later = time.time() + 10 * disk.STALE_S  # `running` untouched for hours: its process runs
    assert scratch.remove_leftovers(staging, now=later, dry_run=True).in_use == (
        elsewhere,
        running,
    )
    cleanup = scratch.remove_leftovers(staging)
    assert names(cleanup) == {old.name, reused.name}
    assert {p.name for p in cleanup.in_use} == {
        fresh.name,
        running.name,
        old_touched.name,
        elsewhere.name,  # another machine's process id says nothing here
    }
    assert next(i for i in cleanup.removed if i.path == old).size_bytes >= 100
    why = next(i for i in cleanup.removed if i.path == old).why
    assert "unchanged for 2h" in why and f"pid {dead}" in why


def test_folders_without_a_claim_record_stay_untouched(staging):
    # older tileauto's unclaimed names, and any folder of that shape without tileauto's claim
    # record: never removed, never written to, never counted as in use
    legacy = staging / "tune-0123456789ab"
    old_mkdtemp = staging / f"proc-{no_such_pid()}-abcd_123"
    no_owner = staging / f"work-{no_such_pid()}-0123456789ab"
    for folder in (legacy, old_mkdtemp, no_owner):
        folder.mkdir()
        age(folder, 10 * disk.STALE_S)
    for dry_run in (True, False):
        assert scratch.remove_leftovers(staging, dry_run=dry_run) == scratch.Cleanup((), ())
    assert all(p.is_dir() and not list(p.iterdir()) for p in (legacy, old_mkdtemp, no_owner))


def test_interrupted_writes_go_by_age_and_other_names_stay(staging, tmp_path):
    stale = staging / "stage-0123456789ab"
    young = staging / "stage-ba9876543210"
    probe = staging / ".probe-k2j4_x9a"
    trash = staging / ".trash-0123456789ab"
    for folder in (stale, young, trash):
        folder.mkdir()
        (folder / "f").write_text("z")
    probe.write_text("")
    age(stale, 2 * disk.STALE_S)
    age(probe, 2 * disk.STALE_S)
    mine = [staging / "notes.txt", staging / "tune-results", staging / "proc"]
    mine[0].write_text("keep")
    age(mine[0], 10 * disk.STALE_S)
    mine[1].write_text("a file, not a folder")
    age(mine[1], 10 * disk.STALE_S)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "precious").write_text("p")
    (staging / "tune-0000000000ff").symlink_to(tmp_path / "elsewhere")
    mine[2].mkdir()
    cleanup = scratch.remove_leftovers(staging)
    assert names(cleanup) == {stale.name, probe.name, trash.name}
    assert young.is_dir() and all(p.exists() for p in mine)
    assert (tmp_path / "elsewhere" / "precious").is_file()  # a link is never followed
    assert (staging / "tune-0000000000ff").is_symlink()


def test_a_missing_staging_dir_is_nothing_to_do(tmp_path):
    assert scratch.remove_leftovers(tmp_path / "none") == scratch.Cleanup((), ())


# -- logs ---------------------------------------------------------------------------------------
@pytest.fixture
def logs(tmp_path):
    settings = Settings.from_env({"TILEAUTO_CACHE_DIR": str(tmp_path / "cache")})
    (settings.logs_dir / "workers").mkdir(parents=True)
    return settings


def write_log(folder: Path, name: str, size: int, mtime: float) -> Path:
    path = folder / name
    path.write_bytes(b"l" * size)
    os.utime(path, (mtime, mtime))
    return path


def run_log(pid: int, n: int = 0, ext: str = "jsonl") -> str:
    return f"autotune-matmul-20250101-1200{n:02d}-{pid}.{ext}"


def test_prune_by_age_keeps_recent_and_running_processes_logs(logs):
    now = time.time()
    dead = no_such_pid()
    d, w = logs.logs_dir, logs.logs_dir / "workers"
    old = write_log(d, run_log(dead, 1), 10, now - 20 * DAY)
    old_worker = write_log(w, f"compile-0-{dead}.log", 10, now - 20 * DAY)
    young = write_log(d, run_log(dead, 2, "log"), 10, now - 3 * DAY)
    # written by this (running) process since it started: in use, however old it looks
    mine = write_log(w, f"run-cpu-{os.getpid()}.log", 10, now)
    assert hygiene.prune_logs(logs, now=now) == 2
    assert not old.exists() and not old_worker.exists() and young.exists() and mine.exists()
    assert hygiene.prune_logs(logs, now=now + 20 * DAY) == 1
    assert not young.exists() and mine.exists()


def test_prune_by_size_removes_the_oldest_not_in_use(logs):
    now = time.time()
    dead = no_such_pid()
    d = logs.logs_dir
    mb = 2**20
    small = dataclasses.replace(logs, log_max_mb=2.0, log_max_age_days=0.0)
    files = [write_log(d, run_log(dead, i), mb, now - (10 - i) * 3600) for i in range(4)]
    written_now = write_log(d, run_log(dead, 9), mb // 2, now - 5)  # may be written again
    assert hygiene.prune_logs(small, now=now) == 3  # 4.5 MiB -> 1.5 MiB: the three oldest
    assert [f.exists() for f in files] == [False, False, False, True] and written_now.exists()


def test_prune_leaves_other_files_and_can_be_turned_off(logs):
    now = time.time()
    d = logs.logs_dir
    others = [
        write_log(d, "notes.log", 10, now - 100 * DAY),
        write_log(d, "autotune-summary.txt", 10, now - 100 * DAY),
        write_log(d / "workers", "readme.txt", 10, now - 100 * DAY),
    ]
    (d / "workers" / run_log(no_such_pid())).mkdir()  # a folder, not a log
    target = write_log(d, run_log(no_such_pid()), 10, now - 100 * DAY)
    off = dataclasses.replace(logs, log_max_mb=0.0, log_max_age_days=0.0)
    assert hygiene.prune_logs(off, now=now) == 0 and target.exists()
    assert hygiene.prune_logs(logs, now=now) == 1
    assert all(p.exists() for p in others) and not target.exists()


def test_prune_without_a_logs_dir(tmp_path):
    settings = Settings.from_env({"TILEAUTO_CACHE_DIR": str(tmp_path / "none")})
    assert hygiene.prune_logs(settings) == 0


def test_clear_logs_deletes_every_log_not_in_use(logs):
    now = time.time()
    dead = no_such_pid()
    d = logs.logs_dir
    old = write_log(d, run_log(dead, 1), 10, now - 2 * DAY)
    recent = write_log(d, run_log(dead, 2), 10, now - 600)
    live = write_log(d / "workers", f"compile-1-{os.getpid()}.log", 10, now)
    deleted, kept = hygiene.clear_logs(d, older_than_s=DAY, dry_run=True)
    assert [f.path for f in deleted] == [old] and old.exists()
    deleted, kept = hygiene.clear_logs(d)
    assert {f.path for f in deleted} == {old, recent} and [f.path for f in kept] == [live]
    assert not old.exists() and not recent.exists() and live.exists()


def test_a_log_held_by_a_running_child_is_in_use_until_it_ends(logs):
    child = Claimant(logs.cache_dir / "tmp")  # any running process of ours
    try:
        path = write_log(logs.logs_dir / "workers", f"compile-0-{child.proc.pid}.log", 10, 0)
        os.utime(path)  # last written after the child started
        (item,) = hygiene.list_logs(logs.logs_dir)
        assert hygiene.log_in_use(item, now=item.mtime + DAY)
    finally:
        child.kill()
    assert not hygiene.log_in_use(item, now=item.mtime + DAY)
    assert hygiene.log_in_use(item, now=item.mtime + hygiene.IN_USE_S / 2)


def test_one_prune_deletes_a_bounded_number_of_logs(logs, monkeypatch):
    monkeypatch.setattr(hygiene, "PRUNE_MAX", 2)
    now = time.time()
    for i in range(5):
        write_log(logs.logs_dir, run_log(no_such_pid(), i), 10, now - 30 * DAY)
    assert [hygiene.prune_logs(logs, now=now) for _ in range(4)] == [2, 2, 1, 0]
    assert hygiene.list_logs(logs.logs_dir) == []
