"""A SIGTERM (or the exit) removes every compile worker's temp folder of this process, also one
whose worker another thread was reaping, and one a thread was making when the signal landed.

The safety net is called where the signal handler would call it, at a point the test chooses.
"""

from __future__ import annotations

import os
import weakref

import psutil
import pytest

from tileauto.workers import safety, tempdirs
from tileauto.workers.procs import Worker


@pytest.fixture
def staging(tmp_path, monkeypatch):
    """The staging dir of this test, a safety net of its own (no other test's workers)."""
    folder = tmp_path / "staging"
    monkeypatch.setenv("TILEAUTO_TMP_DIR", str(folder))
    if hasattr(tempdirs, "_Claims"):  # a fresh record: the process is not ending
        monkeypatch.setattr(tempdirs, "_CLAIMS", tempdirs._Claims())
    monkeypatch.setattr(safety.NET, "live", weakref.WeakSet())
    monkeypatch.setattr(safety.ForkServer, "stop_shared", classmethod(lambda cls: None))
    return folder


def work_folders(staging):
    return sorted(p.name for p in staging.glob(f"{tempdirs.KIND}-{os.getpid()}-*"))


def gone(pid):
    """Whether the killed process ends (waited for: on a loaded machine a process with torch
    and TVM mapped may take longer to exit than the safety net's half second)."""
    try:
        psutil.Process(pid).wait(timeout=60)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def test_the_temp_folder_of_a_worker_being_reaped_goes_with_a_sigterm(staging):
    worker = Worker("sigterm-reaped", own_tmp=True).start()
    assert worker._tmp is not None and len(work_folders(staging)) == 1
    pid = worker.pid
    # another thread's _reap took its handles out and waits for the process: the signal lands
    taken, worker._tmp = worker._tmp, None
    safety.shutdown_all()
    assert work_folders(staging) == []
    assert gone(pid)  # killed, and waited for before its folder was removed
    taken.release()


def test_a_temp_folder_being_made_when_the_signal_lands_goes_too(staging, monkeypatch):
    made = []
    claim = tempdirs.claim_scratch_dir

    def claim_then_signal(parent, prefix):
        tmp = claim(parent, prefix)
        made.append(tmp)
        safety.shutdown_all()  # the handler runs here, before any worker knows the folder
        return tmp

    monkeypatch.setattr(tempdirs, "claim_scratch_dir", claim_then_signal)
    tempdirs.worker_temp_dir()
    assert len(made) == 1 and not made[0].path.exists()
    assert work_folders(staging) == []
    assert tempdirs.worker_temp_dir() is None  # the process is ending: no new folder
    assert work_folders(staging) == []
    made[0].release()
