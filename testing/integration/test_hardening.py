"""Issue 15 end to end on real LLVM kernels: a hostile second user, limits that hold, a full
disk. (The cache-level cases are in ``testing/unit/cache/test_security.py``.)

The hostile-user cases run as a second uid (a forked child that calls setuid) where this
process is root, and are skipped with the reason otherwise; the full-disk cases mount a small
tmpfs, and are skipped where that is not allowed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import psutil
import pytest
import torch
from cache_kernels import jit_scale_add, ref_scale_add, scale_add, tune_scale_add
from second_user import OTHER_UID, needs_root

import tileauto
from tileauto.build.builder import compile_workers
from tileauto.errors import InputSupplyError, TileautoError
from tileauto.workers import procs

pytestmark = pytest.mark.timeout(300)


def cache_messages(caught) -> list[str]:
    return [str(w.message) for w in caught if "tileauto cache" in str(w.message)]


def check(kernel) -> None:
    a = torch.rand(1024)
    torch.testing.assert_close(kernel(a), ref_scale_add(a))


def owned_by_us(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.lstat().st_uid == os.getuid()]


# -- 1. a hostile second user ------------------------------------------------------------------
@needs_root
def test_a_tmp_dir_another_user_created_first_is_not_staged_in(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "tmp").mkdir()
    os.chown(cache / "tmp", OTHER_UID, OTHER_UID)  # another user created tmp/ first...
    (cache / "tmp").chmod(0o777)  # ...open to all, as theirs to swap things in
    assert (cache / "tmp").stat().st_uid == OTHER_UID
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(cache))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tune_scale_add()
    messages = cache_messages(caught)
    assert any(f"owned by uid {OTHER_UID}" in m for m in messages), messages
    check(result.kernel)
    # nothing was staged where the other user could swap it...
    assert owned_by_us(cache / "tmp") == []
    # ...and the tuned entry, cached in the (safe) root, loads in a fresh process
    assert result.key is not None and (cache / "autotuner" / result.key).is_dir()


def test_a_world_writable_cache_root_is_never_written_to(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)  # "created 0777"
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(cache))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tune_scale_add()
        kernel = jit_scale_add.__class__(jit_scale_add.factory, jit_scale_add.compile_args)(1024)
    check(result.kernel)
    check(kernel)
    messages = cache_messages(caught)
    assert messages and all("writable by group or others" in m for m in messages), messages
    assert not (cache / "autotuner").exists() and not (cache / "kernels").exists()
    assert not (cache / "tmp").exists() or owned_by_us(cache / "tmp") == []


# -- 2. limits that hold --------------------------------------------------------------------------
def never_returns(A):
    threading.Event().wait()


def never_supplies(params):
    threading.Event().wait()


def test_a_ref_prog_that_never_returns_obeys_the_timeout():
    with pytest.raises(TileautoError, match=r"ref_prog did not finish within .* 3 s") as info:
        tune_scale_add(ref_prog=never_returns, timeout=3)
    assert not isinstance(info.value, procs.WorkerTimeout)


def test_a_supply_prog_that_never_returns_obeys_the_timeout():
    with pytest.raises(InputSupplyError, match=r"supply_prog did not finish within .* 3 s"):
        tune_scale_add(supply_prog=never_supplies, timeout=3)


def spawning_scale_add(n: int, pid_dir: str, block: int = 16):
    """:func:`scale_add`, after starting a child in a session of its own that never ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True
    )
    Path(pid_dir, f"{child.pid}.pid").write_text(str(child.pid))
    return scale_add(n, block)


def chatty_scale_add(n: int, mib: int, block: int = 16):
    """:func:`scale_add`, after printing ``mib`` MiB (straight to file descriptor 1)."""
    chunk = b"x" * 1023 + b"\n"
    for _ in range(mib * 1024):
        os.write(1, chunk)
    return scale_add(n, block)


def _tune(factory, *args):
    tuner = tileauto.AutoTuner.from_kernel(factory, [{"block": 8}, {"block": 16}])
    tuner.args = args
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    tuner.set_profile_args(warmup=1, rep=3, ref_prog=ref_scale_add)
    return tuner.run(verbose=False)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_factorys_setsid_child_does_not_outlive_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_COMPILE_ISOLATION", "process")
    result = _tune(spawning_scale_add, 1024, str(tmp_path))
    check(result.kernel)
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert pids, "the factory ran in no worker"
    try:
        assert [pid for pid in pids if not gone(pid)] == []
    finally:
        for pid in pids:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


LOG_CAP_BYTES = getattr(procs, "_LOG_CAP_BYTES", 16 << 20)


def test_a_worker_log_is_capped(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_COMPILE_ISOLATION", "process")
    mib = LOG_CAP_BYTES // (1 << 20) + 8
    result = _tune(chatty_scale_add, 1024, mib)
    check(result.kernel)
    logs = [Path(w.output_path) for w in compile_workers(1) if w.output_path]
    logs = [p for p in logs if p.exists()]
    assert logs, "no worker log"
    assert max(p.stat().st_size for p in logs) <= LOG_CAP_BYTES


# -- 3. a full disk --------------------------------------------------------------------------------
@pytest.fixture
def full_cache(tmp_path, monkeypatch):
    """A cache root on a 2 MiB tmpfs that is full (skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        with open(mount / "ballast", "wb") as f:
            while True:
                f.write(b"\0" * (1 << 16))
    except OSError:
        pass
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(mount / "cache"))
    yield mount / "cache"
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_jit_on_a_full_disk_returns_the_kernel_with_one_warning(full_cache, monkeypatch):
    from tileauto.jit import impl

    monkeypatch.setattr(impl, "_PROCESS_DIR", None)  # as in a new process: scratch made now
    fresh = jit_scale_add.__class__(jit_scale_add.factory, jit_scale_add.compile_args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = fresh(1024, block=32)
    check(kernel)
    messages = cache_messages(caught)
    assert len(messages) == 1 and "No space left" in messages[0], messages


def test_tuning_on_a_full_disk_returns_the_kernel_with_one_warning(full_cache):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tune_scale_add(n=2048)
    check_n = torch.rand(2048)
    torch.testing.assert_close(result.kernel(check_n), ref_scale_add(check_n))
    messages = cache_messages(caught)
    assert len(messages) == 1 and "No space left" in messages[0], messages
    assert "returned but not cached" in messages[0]
