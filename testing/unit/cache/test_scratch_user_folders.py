"""The leftovers sweep and log pruning never touch what is not tileauto's.

``TILEAUTO_TMP_DIR`` (the staging dir) and ``TILEAUTO_LOG_DIR`` may point at folders of the
user's with other things in them. Only what tileauto provably made is removed: a scratch folder
of the exact shape ``<kind>-<pid>-<12 hex>`` whose ``.owner`` holds tileauto's claim record for
that pid, a ``stage-<12 hex>`` folder, a ``.probe-*`` file, a ``.trash-<12 hex>``; worker logs
named ``tileauto-worker-<name>-<pid>.log`` (or exactly as older versions named them). Nothing is
written into a folder to judge it. Ages are set with ``os.utime``, never waited for.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tileauto import cli
from tileauto.cache import disk, folders, hygiene, scratch
from tileauto.settings import Settings
from tileauto.workers import tempdirs
from tileauto.workers.procs import Worker

ROOT = Path(__file__).resolve().parents[3]
DAY = 86400.0
OLD = 3 * 3600.0  # older than every age rule (disk.STALE_S is an hour)


def no_such_pid() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def set_age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything in it look last changed ``seconds`` ago."""
    when = time.time() - seconds
    for p in [*path.rglob("*"), path] if path.is_dir() else [path]:
        os.utime(p, (when, when), follow_symlinks=False)


def snapshot(folder: Path) -> dict[str, tuple[str, float, bytes]]:
    """Every path under ``folder``: its kind, mtime and content (files)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        kind = "dir" if p.is_dir() else "file"
        out[str(p.relative_to(folder))] = (
            kind,
            st.st_mtime,
            p.read_bytes() if kind == "file" else b"",
        )
    return out


def user_folders(staging: Path) -> None:
    """What a user keeps in a folder of their own that they point TILEAUTO_TMP_DIR at: the
    names of the bug report, and names close to tileauto's that tileauto never made."""
    dead = no_such_pid()
    for name in (
        "tune-results",
        "work-notes",
        "run-1",
        "proc-data",
        "stage-2",
        "mydata",
        ".stage-2",
        ".probe-old",
        ".trash-1000",  # a delete in progress is only ever .trash-<12 hex>
        f"tune-{dead}-abcd_123",  # no 12 hex
        "tune-0123456789ab",  # no pid
        f"work-{dead}-0123456789ab",  # tileauto's shape, but no claim record: not provably its
        f"run-{dead}-0123456789ab",  # an empty .owner
        f"proc-{dead}-0123456789ab",  # a .owner of other content
        f"tune-{dead}-0123456789ab",  # a record of another process
    ):
        (staging / name).mkdir()
        (staging / name / "thesis.txt").write_text(f"precious {name}")
    (staging / f"run-{dead}-0123456789ab" / scratch.OWNER).write_text("")
    (staging / f"proc-{dead}-0123456789ab" / scratch.OWNER).write_text("my notes")
    (staging / f"tune-{dead}-0123456789ab" / scratch.OWNER).write_text(
        json.dumps({"tileauto": scratch.MARK, "pid": dead - 1, "host": socket.gethostname()})
    )
    (staging / "stage-0123456789ab").write_text("a file, where tileauto stages folders")
    (staging / ".probe-abcd1234").mkdir()  # a folder, where tileauto's probe is a file
    for child in staging.iterdir():
        set_age(child, OLD)
    (staging / "tune-fresh").mkdir()  # changed just now: was given a .owner and called in use


@pytest.fixture
def staging(tmp_path):
    return folders.make_private_dir(tmp_path / "mine")


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("only", [None, "tune", "work", "run", "proc"])
def test_user_folders_in_the_staging_dir_are_never_removed_nor_written(staging, dry_run, only):
    user_folders(staging)
    before = snapshot(staging)
    cleanup = scratch.remove_leftovers(staging, dry_run=dry_run, only=only)
    assert cleanup == scratch.Cleanup((), ())  # nothing removed, nothing called in use
    assert snapshot(staging) == before  # not even a .owner made, nor an mtime changed


def test_leftovers_of_killed_runs_still_go_next_to_user_folders(staging):
    user_folders(staging)
    before = snapshot(staging)
    # a claim made by a process that ended without removing it (as a SIGKILL leaves it)
    code = (
        "import sys; from tileauto.cache.scratch import claim_scratch_dir as c; "
        "p = c(sys.argv[1], 'work').path; (p / 'lib0.o').write_bytes(b'0' * 4096); print(p)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dead = Path(
        subprocess.run(
            [sys.executable, "-c", code, str(staging)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
    )
    assert json.loads((dead / scratch.OWNER).read_text())["tileauto"] == scratch.MARK
    # a claim of a tileauto from before the mark: exactly its fields, the pid of its name
    gone = no_such_pid()
    legacy = staging / f"tune-{gone}-00000000abcd"
    legacy.mkdir()
    (legacy / scratch.OWNER).write_text(
        json.dumps({"pid": gone, "host": socket.gethostname(), "time": 0.0})
    )
    stale = staging / "stage-00000000abcd"  # an interrupted cache write
    stale.mkdir()
    trash = staging / ".trash-00000000abcd"  # an interrupted delete
    trash.mkdir()
    probe = staging / ".probe-k2j4_x9a"
    probe.write_bytes(b"\0" * 4096)
    for path in (stale, probe):
        set_age(path, OLD)
    cleanup = scratch.remove_leftovers(staging, only="work")
    assert {i.path for i in cleanup.removed} == {dead} and cleanup.in_use == ()
    cleanup = scratch.remove_leftovers(staging)
    assert {i.path for i in cleanup.removed} == {legacy, stale, trash, probe}
    assert f"pid {gone}" in next(i.why for i in cleanup.removed if i.path == legacy)
    assert cleanup.in_use == () and snapshot(staging) == before


def test_a_worker_start_leaves_user_folders_in_the_staging_dir(staging, monkeypatch):
    # every compile worker's start sweeps the staging dir for the temp folders of dead workers
    monkeypatch.setenv("TILEAUTO_TMP_DIR", str(staging))
    user_folders(staging)
    before = snapshot(staging)
    tmp = tempdirs.worker_temp_dir()
    assert tmp is not None and tmp.path.parent == staging
    tmp.remove()
    assert snapshot(staging) == before


def run(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_cache_clear_leaves_the_users_folders_in_tileauto_tmp_dir(staging, monkeypatch, capsys):
    user_folders(staging)
    before = snapshot(staging)
    monkeypatch.setenv("TILEAUTO_TMP_DIR", str(staging))
    for argv in (("cache", "clear", "--dry-run"), ("cache", "clear")):
        code, out = run(capsys, *argv)
        assert code == 0 and str(staging) in out
        assert re.search(r"remove[d]? 0 leftovers", out) and "in use" not in out, out
        assert "tune-results" not in out and "work-notes" not in out, out
    assert snapshot(staging) == before


def test_cache_clear_leaves_a_projects_tmp_folder_alone(tmp_path, capsys):
    project = tmp_path / "project"
    (project / "kernels" / "mykernel").mkdir(parents=True)
    (project / "kernels" / "mykernel" / "k.c").write_text("data")
    for name in ("run-1", "work-in-progress", "work_old"):
        (project / "tmp" / name).mkdir(parents=True)
        (project / "tmp" / name / "results.csv").write_text("data")
        set_age(project / "tmp" / name, OLD)
    before = snapshot(project)
    cli.main(["cache", "clear", "--cache-dir", str(project)])
    capsys.readouterr()
    assert snapshot(project) == before


# -- logs ---------------------------------------------------------------------------------------
@pytest.fixture
def logs(tmp_path):
    settings = Settings.from_env({"TILEAUTO_LOG_DIR": str(tmp_path / "mylogs")})
    (settings.logs_dir / "workers").mkdir(parents=True)
    return settings


def write_log(path: Path, days: float) -> Path:
    path.write_text("log line\n")
    when = time.time() - days * DAY
    os.utime(path, (when, when))
    return path


def test_only_tileautos_worker_logs_are_pruned(logs):
    w = logs.logs_dir / "workers"
    dead = no_such_pid()
    mine = [
        write_log(w / name, 30)
        for name in (
            "nightly-backup-20240101.log",  # the report's: "pid" 20240101 is not running
            f"notes-{dead}.log",
            f"run-1-{dead}.log",
            f"run-nightly-{dead}.log",
            "compile-0-20240101.log",  # a date, not a pid (more digits than Linux allows)
            f"tileauto-{dead}.log",
        )
    ]
    ours = write_log(w / hygiene.worker_log_name("compile-0", dead), 30)
    older = write_log(w / f"compile-3-{dead}.log", 30)  # as tileauto named them before
    run_worker = write_log(w / f"run-cuda-{dead}.log", 30)
    listed = {item.path for item in hygiene.list_logs(logs.logs_dir)}
    assert listed == {ours, older, run_worker}
    deleted, kept = hygiene.clear_logs(logs.logs_dir, dry_run=True)
    assert {item.path for item in deleted} == {ours, older, run_worker} and kept == []
    assert hygiene.prune_logs(logs) == 3
    assert all(p.is_file() for p in mine) and not ours.exists() and not older.exists()


def test_cache_clear_logs_leaves_other_logs(logs, monkeypatch, capsys):
    monkeypatch.setenv("TILEAUTO_LOG_DIR", str(logs.logs_dir))
    theirs = write_log(logs.logs_dir / "workers" / "nightly-backup-20240101.log", 30)
    code, out = run(capsys, "cache", "clear", "--logs", "--dry-run")
    assert code == 0 and str(theirs) not in out
    code, out = run(capsys, "cache", "clear", "--logs")
    assert code == 0 and "deleted 0 logs" in out and theirs.is_file()


def test_a_workers_log_has_tileautos_name(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_LOG_DIR", str(tmp_path))
    worker = Worker("compile-0")
    try:
        path = Path(worker._output_file() or "")
    finally:
        worker.close()
    assert path.name == f"tileauto-worker-compile-0-{os.getpid()}.log" and path.is_file()
    (item,) = hygiene.list_logs(tmp_path)
    assert item.path == path and item.pid == os.getpid()


def test_stage_folder_and_staging_names_are_the_ones_tileauto_makes(tmp_path):
    # the patterns above follow what the makers write: keep them in step
    made = disk.stage_dir(tmp_path / "s")
    assert scratch._STAGE.match(made.name)
    claim = scratch.claim_scratch_dir(tmp_path / "s", "proc")
    try:
        m = scratch._SCRATCH.match(claim.path.name)
        assert m and int(m["pid"]) == os.getpid()
        record = json.loads((claim.path / scratch.OWNER).read_text())
        assert scratch._made_by_tileauto(record, os.getpid())
    finally:
        claim.remove()
