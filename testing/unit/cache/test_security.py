"""Issue 15, points 1, 3 and 4 at the level of tileauto.cache: refused folders, signed
measurements, full disks, stray files at entry paths, unusable lock folders.

The hostile-user cases run as a second uid (a forked child that calls setuid) where this
process is root, and are skipped with the reason otherwise.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import tempfile
import uuid
import warnings
from pathlib import Path

import pytest
from second_user import OTHER_UID, as_second_user, needs_root

from tileauto.cache import catalog, disk, folders, locks
from tileauto.records import Trial, TrialStatus


def fill(out: Path, text: str = "new") -> None:
    (out / "kernel").mkdir()
    (out / "kernel" / "kernel.so").write_bytes(b"\x7fELF" + text.encode() * 1000)


def cache_messages(caught) -> list[str]:
    return [str(w.message) for w in caught if "tileauto cache" in str(w.message)]


# -- 1. folders another user could write -----------------------------------------------------
def test_a_world_writable_folder_is_refused_by_mode_not_by_trying(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(folders.UnsafeDirError, match="writable by group or others"):
        folders.make_private_dir(root / "tmp")  # its holder, the root, lets others swap it
    with pytest.raises(folders.UnsafeDirError, match="writable by group or others"):
        folders.make_private_dir(root)
    assert "writable" in folders.folder_problem(root)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert folders.folder_problem(sticky) is not None  # a cache folder: no sticky exemption
    assert folders.folder_problem(sticky, holder=True) is None  # a holder like /tmp: fine


@needs_root
def test_a_foreign_tmp_dir_is_refused_and_staging_falls_back(tmp_path):
    root = folders.make_private_dir(tmp_path / "cache")
    tmp = root / "tmp"
    tmp.mkdir(mode=0o700)
    os.chown(tmp, OTHER_UID, OTHER_UID)  # another user created tmp/ first
    with pytest.raises(folders.UnsafeDirError, match=f"owned by uid {OTHER_UID}"):
        disk.stage_dir(tmp)
    final = root / "autotuner" / ("a" * 32)
    disk.write_entry(final, fill, {"format": "1"}, tmp)  # staged privately elsewhere
    assert disk.verify(final) is None
    assert list(tmp.iterdir()) == []  # nothing of ours in the other user's folder


def test_a_symlinked_kind_folder_to_a_foreign_folder_is_refused(tmp_path):
    root = folders.make_private_dir(tmp_path / "cache")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    (root / "autotuner").symlink_to(elsewhere)
    with pytest.raises(folders.UnsafeDirError):
        disk.write_entry(root / "autotuner" / ("b" * 32), fill, {"format": "1"}, root / "tmp")
    assert list(elsewhere.iterdir()) == []


def test_an_entry_under_an_unsafe_root_is_refused(tmp_path):
    root = folders.make_private_dir(tmp_path / "cache")
    final = root / "autotuner" / ("c" * 32)
    disk.write_entry(final, fill, {"format": "1"}, root / "tmp")
    assert disk.verify(final) is None
    root.chmod(0o777)
    assert "writable by group or others" in disk.verify(final)


@needs_root
def test_seal_refuses_files_another_user_planted(tmp_path):
    staged = disk.stage_dir(tmp_path / "stage")
    fill(staged)
    os.chown(staged / "kernel" / "kernel.so", OTHER_UID, OTHER_UID)
    with pytest.raises(folders.UnsafeDirError, match=f"owned by uid {OTHER_UID}"):
        disk.seal(staged, {"format": "1"})


@needs_root
def test_a_second_user_cannot_write_anything_the_cache_wrote(tmp_path):
    # under the system temp dir, not pytest's (0700): the second user must reach the root
    shared = Path(tempfile.mkdtemp(prefix="tileauto-hostile-"))
    shared.chmod(0o755)
    try:
        _attack_a_cache(folders.make_private_dir(shared / "cache"))
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _attack_a_cache(root: Path) -> None:
    final = root / "autotuner" / ("d" * 32)
    disk.write_entry(final, fill, {"format": "1"}, root / "tmp")
    root.chmod(0o711)  # others may pass through the root, as through a home folder

    def attack() -> int:
        targets = [root, root / "tmp", root / "autotuner", final, final / "kernel"]
        for folder in targets:
            try:
                (folder / f"planted-{uuid.uuid4().hex}").write_text("x")
                return 1  # planted: the cache is not private
            except PermissionError:
                pass
        try:
            (final / "kernel" / "kernel.so").write_bytes(b"planted")
            return 1
        except PermissionError:
            pass
        try:
            os.rename(root / "tmp", root / "swapped")
            return 1
        except PermissionError:
            return 0

    def reach() -> int:  # the attack is real: the second user does get to the root
        return 0 if os.path.isdir(root) else 1

    assert as_second_user(reach) == 0
    assert as_second_user(attack) == 0
    assert disk.verify(final) is None


# -- 1. measurements are signed ----------------------------------------------------------------
def test_an_edited_measurement_is_not_used(tmp_path):
    from tileauto.cache.tuning import MEASUREMENT_FORMAT, _measurement_hash, _read_measurement

    trial = Trial(0, {"block": 8}, TrialStatus.COMPILE_ERROR, error="does not compile")
    body = {"config": '{"block": 8}', "trial": trial.to_json()}
    path = tmp_path / "m.json"
    signed = {"format": MEASUREMENT_FORMAT, **body, "sha256": _measurement_hash(body)}
    path.write_text(json.dumps(signed))
    path.chmod(0o600)
    assert _read_measurement(path, body["config"]) == trial
    edited = json.loads(path.read_text())
    edited["trial"]["status"] = "ok"  # a never-run config made to look measured and fast
    path.write_text(json.dumps(edited))
    assert _read_measurement(path, body["config"]) is None
    unsigned = {"format": 1, **body}  # today's format: no hash
    path.write_text(json.dumps(unsigned))
    assert _read_measurement(path, body["config"]) is None


# -- 3. full disks ------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs (skipped where mounting is not allowed), unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_failed_cross_filesystem_copy_leaves_no_partial_stage(tmp_path, small_disk):
    root = folders.make_private_dir(small_disk / "cache")
    (small_disk / "ballast").write_bytes(b"\0" * (2 << 20))  # about 2 MiB left

    def big(out: Path) -> None:
        (out / "kernel").mkdir()
        (out / "kernel" / "kernel.so").write_bytes(os.urandom(3 << 20))

    with pytest.raises(OSError) as info:
        disk.write_entry(root / "kernels" / ("e" * 32), big, {"format": "1"}, tmp_path / "st")
    assert "No space left" in str(info.value) or getattr(info.value, "errno", 0) == errno.ENOSPC
    assert [p.name for p in (root / "kernels").iterdir()] == []  # no .stage-* filling the disk
    assert not any((tmp_path / "st").iterdir())


def test_staging_on_a_full_disk_falls_back_to_a_private_temp_dir(tmp_path, small_disk):
    staging = folders.make_private_dir(small_disk / "tmp")
    with open(small_disk / "ballast", "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
        except OSError:
            pass
    final = tmp_path / "cache" / "kernels" / ("f" * 32)
    disk.write_entry(final, fill, {"format": "1"}, staging)
    assert disk.verify(final) is None
    with pytest.raises(OSError, match="No space left"):
        folders.make_private_dir(staging)  # what process-wide scratch folders fall back on


# -- 4. entries that never healed --------------------------------------------------------------
@pytest.mark.parametrize("stray", ["file", "symlink", "dangling"])
def test_a_stray_file_or_link_at_an_entry_path_is_reported_and_replaced(tmp_path, stray):
    root = folders.make_private_dir(tmp_path / "cache")
    kind = folders.make_private_dir(root / "autotuner")
    final = kind / ("0" * 32)
    if stray == "file":
        final.write_text("not an entry")
    elif stray == "symlink":
        target = folders.make_private_dir(tmp_path / "target")
        final.symlink_to(target)
    else:
        final.symlink_to(tmp_path / "nowhere")
    info = [e for e in catalog.list_entries(root) if e.key == final.name]
    assert len(info) == 1 and catalog.verify_entry(info[0]) is not None  # verify reports it
    disk.write_entry(final, fill, {"format": "1"}, root / "tmp")
    assert disk.verify(final) is None and final.is_dir() and not final.is_symlink()
    assert sorted(p.name for p in kind.iterdir()) == [final.name]  # no .stage-*, no .trash-*
    if stray == "symlink":
        assert target.is_dir()  # the link was replaced, not what it pointed at


def test_an_unusable_locks_folder_warns_once_and_still_locks(tmp_path):
    root = folders.make_private_dir(tmp_path / "cache")
    (root / ".locks").write_text("a file where the lock folder should be")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with locks.best_effort_lock(root / ".locks", "autotuner-x"):
            fallback = folders.private_fallback_dir("locks")
            assert (fallback / "autotuner-x.lock").exists()  # a real lock, elsewhere
        with locks.best_effort_lock(root / ".locks", "autotuner-y"):
            pass
    messages = cache_messages(caught)
    assert len(messages) == 1 and "cannot lock" in messages[0], messages
