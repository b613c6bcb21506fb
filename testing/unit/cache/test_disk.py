"""tileauto.cache.disk: private folders, sealed entries, atomic publish, locks, verification."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tileauto.cache import disk, folders, locks
from tileauto.settings import Settings

REQUIRED = ("kernel/kernel.so",)


def fill_files(out: Path, text: str = "new", n: int = 4) -> None:
    (out / "kernel").mkdir()
    (out / "kernel" / "kernel.so").write_bytes(b"\x7fELF" + text.encode() * 1000)
    for i in range(n):
        (out / f"record{i}.json").write_text(json.dumps({"i": i, "text": text}))


def make_entry(tmp_path: Path, name: str = "entry", text: str = "new", **meta) -> Path:
    final = tmp_path / "cache" / "autotuner" / name
    disk.write_entry(
        final, lambda out: fill_files(out, text), {"format": "1", **meta}, tmp_path / "stage"
    )
    return final


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- folders and sealing ------------------------------------------------------------------------
def test_make_private_dir_creates_every_missing_parent_0700(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    old = os.umask(0o002)
    try:
        folders.make_private_dir(target)
    finally:
        os.umask(old)
    for p in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert mode(p) == 0o700


def test_make_private_dir_on_a_file_raises(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OSError):
        folders.make_private_dir(tmp_path / "f")


def test_sealed_entry_verifies_and_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0o000)
    try:
        entry = make_entry(tmp_path, key="k")
    finally:
        os.umask(old)
    assert disk.verify(entry, {"key": "k"}, required=REQUIRED) is None
    manifest = disk.read_manifest(entry)
    assert set(manifest["files"]) == {"kernel/kernel.so", *(f"record{i}.json" for i in range(4))}
    assert manifest["format"] == "1" and manifest["created"] > 0
    for p in [entry, *entry.rglob("*")]:
        assert mode(p) & 0o077 == 0, p
    assert not list((tmp_path / "stage").iterdir())  # staging cleaned up


def test_shared_seal_is_readable_but_not_writable_by_others(tmp_path):
    final = tmp_path / "shipped"
    disk.write_entry(final, fill_files, {"format": "1"}, tmp_path / "stage", shared=True)
    assert mode(final) == 0o755 and mode(final / "kernel" / "kernel.so") == 0o644
    assert disk.verify(final) is None


# -- verification: each kind of damage is named, never raised ---------------------------------
def _truncate(e: Path) -> None:
    so = e / "kernel" / "kernel.so"
    so.write_bytes(so.read_bytes()[:100])


def _flip(e: Path) -> None:
    p = e / "record1.json"
    data = bytearray(p.read_bytes())
    data[3] ^= 0x01
    p.write_bytes(bytes(data))


def _manifest(e: Path, text: str) -> None:
    (e / disk.MANIFEST).write_text(text)


def _edit_manifest(e: Path, **changes) -> None:
    data = disk.read_manifest(e)
    data.update(changes)
    _manifest(e, json.dumps(data))


DAMAGE = {
    "truncated library": (_truncate, "kernel/kernel.so does not match its sha256"),
    "flipped byte": (_flip, "record1.json does not match its sha256"),
    "missing file": (lambda e: (e / "record2.json").unlink(), "record2.json is missing"),
    "no manifest (partial entry)": (
        lambda e: (e / disk.MANIFEST).unlink(),
        "no readable manifest",
    ),
    "truncated manifest": (
        lambda e: _manifest(e, (e / disk.MANIFEST).read_text()[:40]),
        "no readable manifest",
    ),
    "manifest not an object": (lambda e: _manifest(e, "[1, 2]"), "no readable manifest"),
    "empty file list": (lambda e: _edit_manifest(e, files={}), "lists no files"),
    "required file not listed": (
        lambda e: _edit_manifest(e, files={"record0.json": "0" * 64}),
        "kernel/kernel.so is not in the manifest",
    ),
    "path outside the entry": (
        lambda e: _edit_manifest(e, files={"kernel/kernel.so": "0", "../x": "0"}),
        "outside the entry",
    ),
    "unknown format": (lambda e: _edit_manifest(e, format="99"), "unknown format '99'"),
    "stale key": (lambda e: _edit_manifest(e, key="other"), "stale: its key is 'other'"),
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_verify_names_each_kind_of_damage(tmp_path, damage):
    entry = make_entry(tmp_path, key="k")
    hurt, message = DAMAGE[damage]
    hurt(entry)
    problem = disk.verify(entry, {"key": "k"}, required=REQUIRED)
    assert problem is not None and message in problem


def test_verify_missing_entry(tmp_path):
    assert disk.verify(tmp_path / "nope") == "missing"


# -- safety -------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["entry folder", "file", "sub-folder"])
@pytest.mark.parametrize("bits", [0o002, 0o020], ids=["world-writable", "group-writable"])
def test_entry_writable_by_others_is_refused(tmp_path, where, bits):
    entry = make_entry(tmp_path)
    path = {"entry folder": entry, "file": entry / "record0.json", "sub-folder": entry / "kernel"}[
        where
    ]
    path.chmod(mode(path) | bits)
    problem = disk.verify(entry)
    assert (
        problem is not None
        and problem.startswith("refused")
        and "writable by group or others" in problem
    )


def test_entry_owned_by_someone_else_is_refused(tmp_path):
    entry = make_entry(tmp_path)
    if os.getuid() == 0:  # root can give a file away, so the real case is tested
        os.chown(entry / "record0.json", 12345, 12345)
        problem = disk.verify(entry)
        assert disk.verify(entry, trusted_uids={0, 12345}) is None
    else:  # others cannot: check the rule by trusting another uid only
        problem = disk.verify(entry, trusted_uids={os.getuid() + 1})
    assert problem is not None and problem.startswith("refused") and "owned by uid" in problem


def test_symlink_inside_an_entry_is_refused(tmp_path):
    entry = make_entry(tmp_path)
    (entry / "link").symlink_to(entry / "record0.json")
    assert "symbolic link" in disk.verify(entry)


# -- publishing ---------------------------------------------------------------------------------
def test_publish_replaces_an_old_entry_atomically(tmp_path):
    entry = make_entry(tmp_path, text="old")
    make_entry(tmp_path, text="new")
    assert disk.verify(entry) is None
    assert "new" in (entry / "record0.json").read_text()
    leftovers = [p.name for p in entry.parent.iterdir() if p.name != "entry"]
    assert leftovers == []


def test_publish_without_atomic_exchange_still_replaces(tmp_path, monkeypatch):
    entry = make_entry(tmp_path, text="old")
    monkeypatch.setattr(disk, "_exchange", lambda a, b: False)
    make_entry(tmp_path, text="new")
    assert disk.verify(entry) is None and "new" in (entry / "record0.json").read_text()


def test_publish_across_file_systems_copies_then_renames(tmp_path, monkeypatch):
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((str(src), str(dst)))
        if "stage" in str(Path(src).parent.name) and len(calls) == 1:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    monkeypatch.setattr(disk.os, "rename", rename)
    entry = make_entry(tmp_path)
    assert disk.verify(entry) is None
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]


def test_remove_tree_and_sweep(tmp_path):
    entry = make_entry(tmp_path)
    disk.remove_tree(entry)
    assert not entry.exists() and not list(entry.parent.iterdir())
    disk.remove_tree(entry)  # already gone: no error
    stale = entry.parent / ".stage-abc"
    stale.mkdir()
    fresh = entry.parent / ".stage-def"
    fresh.mkdir()
    old = time.time() - 2 * disk.STALE_S
    os.utime(stale, (old, old))
    keep = entry.parent / "0123"
    keep.mkdir()
    os.utime(keep, (old, old))
    assert disk.sweep(entry.parent) == 1
    assert sorted(p.name for p in entry.parent.iterdir()) == [".stage-def", "0123"]


# Filesystem calls the writer announces as steps of the write protocol: every change another
# process could see, plus the fsyncs that order them.
_STEP_CALLS = ("mkdir", "rename", "replace", "unlink", "rmdir", "chmod", "fsync")


def _write_in_steps(tmp_path: Path, report: int, go: int) -> None:
    """In a forked child: announce each filesystem step on ``report`` and wait on ``go``.

    The parent answers ``b"g"`` to let a step run, or kills the child while it waits, so it
    lands exactly between two steps. Never returns.
    """
    try:

        def announce(what: str) -> None:
            os.write(report, what.encode() + b"\n")
            if os.read(go, 1) != b"g":  # the parent is gone
                os._exit(3)

        def stepped(name: str, real):
            def step(*args, **kwargs):
                announce(f"{name} {args[0] if args else ''}")
                return real(*args, **kwargs)

            return step

        for name in _STEP_CALLS:
            setattr(os, name, stepped(name, getattr(os, name)))
        real_open = io.open

        def open_(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+"):
                announce(f"open({mode}) {file}")
            return real_open(file, mode, *args, **kwargs)

        io.open = builtins.open = open_
        make_entry(tmp_path, text="new")
        os._exit(0)
    finally:
        os._exit(1)


def _write_killed_after(tmp_path: Path, k: int | None) -> list[str]:
    """Fork a writer, let its first ``k`` steps run and SIGKILL it before the next one (None:
    let it finish). Returns the steps it announced (random names masked)."""
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(report_r)
        os.close(go_w)
        _write_in_steps(tmp_path, report_w, go_r)
    os.close(report_w)
    os.close(go_r)
    steps: list[str] = []
    with os.fdopen(report_r, "rb") as reports, os.fdopen(go_w, "wb", buffering=0) as go:
        for line in reports:
            if k is not None and len(steps) == k:
                os.kill(pid, signal.SIGKILL)
                break
            steps.append(re.sub(r"[0-9a-f]{12}", "*", line.decode().rstrip("\n")))
            go.write(b"g")
        _, status = os.waitpid(pid, 0)
    if k is None or len(steps) < k:
        assert os.waitstatus_to_exitcode(status) == 0, f"the writer failed after {steps}"
    return steps


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replace", [False, True], ids=["new entry", "replacing an entry"])
def test_a_writer_killed_between_any_two_steps_leaves_old_or_complete_new(tmp_path, replace):
    """SIGKILL a forked writer after each step of the write protocol in turn (every mkdir,
    write, chmod, fsync, rename and delete): the entry is always old (or absent) or whole
    and new, and switches from one to the other exactly once."""
    final = tmp_path / "cache" / "autotuner" / "entry"

    def outcome() -> str | None:
        if not final.exists():
            assert not replace, "the old entry vanished"
            return None
        assert disk.verify(final) is None, "a partial entry"
        return json.loads((final / "record0.json").read_text())["text"]

    def fresh() -> None:  # the folders exist from earlier writers: every run takes one path
        disk.remove_tree(final)
        folders.make_private_dir(final.parent)
        folders.make_private_dir(tmp_path / "stage")
        if replace:
            make_entry(tmp_path, text="old")

    fresh()
    steps = _write_killed_after(tmp_path, None)  # the whole protocol, step by step
    assert outcome() == "new"
    assert any(s.startswith("rename") for s in steps) and any(s.startswith("fsync") for s in steps)
    seen = []
    for k in range(len(steps)):
        fresh()
        kinds = [s.split()[0] for s in _write_killed_after(tmp_path, k)]
        assert kinds == [s.split()[0] for s in steps[:k]], "the writer took another path"
        try:
            seen.append(outcome())
        except AssertionError as exc:
            raise AssertionError(f"killed before step {k} ({steps[k]}): {exc}") from None
    before = "old" if replace else None
    switch = seen.index("new")  # the one rename (or exchange) that publishes
    assert switch > 0 and seen == [before] * switch + ["new"] * (len(seen) - switch), seen
    disk.sweep(final.parent, max_age_s=0)
    disk.sweep(tmp_path / "stage", max_age_s=0)
    assert sorted(p.name for p in final.parent.iterdir()) == ["entry"]


# -- locks and staging --------------------------------------------------------------------------
def test_key_lock_excludes_and_reports_waiting(tmp_path):
    order = []
    waited = threading.Event()
    inside = threading.Event()
    release = threading.Event()

    def holder():
        with locks.key_lock(tmp_path / "locks", "k"):
            inside.set()
            release.wait(10)
            order.append("holder")

    t = threading.Thread(target=holder)
    t.start()
    inside.wait(10)
    threading.Timer(0.2, release.set).start()
    with locks.key_lock(tmp_path / "locks", "k", on_wait=waited.set):
        order.append("waiter")
    t.join()
    assert waited.is_set() and order == ["holder", "waiter"]
    assert mode(tmp_path / "locks") == 0o700


def test_key_lock_without_waiting_says_whether_it_holds_the_lock(tmp_path):
    with locks.key_lock(tmp_path / "locks", "k") as held:
        assert held is True
        with locks.key_lock(tmp_path / "locks", "k", wait=False) as second:
            assert second is False  # held by another open file: not waited for
        with locks.best_effort_lock(tmp_path / "locks", "k", wait=False) as third:
            assert third is False
    with locks.key_lock(tmp_path / "locks", "k", wait=False) as free:
        assert free is True


def test_writable_staging_falls_back_to_the_system_temp_dir(tmp_path, monkeypatch):
    settings = Settings(cache_dir=tmp_path / "cache")
    assert locks.writable_staging(settings) is settings

    def refuse(path):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(folders, "make_private_dir", refuse)
    moved = locks.writable_staging(settings)
    assert moved.staging_dir != settings.staging_dir and moved.staging_dir.is_dir()
    assert moved.cache_dir == settings.cache_dir


_REFUSED_STAGING_CHILD = """
import errno
from tileauto.cache import folders, locks

def refuse(path):
    raise OSError(errno.EEXIST, "someone else's", str(path))

folders.make_private_dir = refuse
first, again = locks.fallback_staging_dir(), locks.fallback_staging_dir()
assert first == again and first.is_dir(), (first, again)
print(first)
"""


def test_the_fallback_staging_is_the_users_shared_folder_or_one_removed_at_exit(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    shared = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tileauto.cache import locks; print(locks.fallback_staging_dir())",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(shared.stdout.strip()) == tmp_path / f"tileauto-{os.getuid()}" / "staging"
    # that name is not usable: one folder for the process, gone once the process ended
    child = subprocess.run(
        [sys.executable, "-c", _REFUSED_STAGING_CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert Path(child.stdout.strip()).parent == tmp_path
    assert not Path(child.stdout.strip()).exists()


def test_best_config_keeps_a_tuple_through_json_and_trusts_no_other_literal():
    from tileauto.cache.entry import config_of, config_record

    config = {"tile": (8, 4), "order": {"k": [(1, 2)]}, "n": 3}
    record = json.loads(json.dumps(config_record(config)))
    assert config_of(record) == config and isinstance(config_of(record)["tile"], tuple)
    plain = config_record({"n": 3, "tile": [8, 4]})
    assert "literal" not in plain  # JSON gives it back as it is
    # a literal that names another config, or is not a literal, is ignored: the JSON counts
    for literal in ("{'tile': (9, 9), 'n': 3}", "__import__('os').getcwd()", "{'a': (1,"):
        forged = {"config": {"tile": [8, 4], "n": 3}, "literal": literal}
        assert config_of(forged) == {"tile": [8, 4], "n": 3}
