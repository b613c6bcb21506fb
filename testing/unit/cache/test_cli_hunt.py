"""The ``tileauto`` command on fake entries: the bugs of a user bug hunt, each kept fixed.

``cache verify --delete`` with an unsafe cache folder, ``cache import`` of stale, old-format
and padded entries, ``cache export`` with ``--trials`` and links, ``--cache-dir`` after ``env``
and its exit codes, a closed output pipe, and the last-resort error line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cache_fakes import fake_result, open_store, trial

from tileauto import cli
from tileauto.cache import catalog, disk
from tileauto.cache.entry import KIND_TUNED
from tileauto.cli import _command
from tileauto.errors import CacheError


@pytest.fixture
def stored(tmp_path, tileauto_env):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8}, 0.5), trial(1, {"block": 16})]))
    return tileauto_env, store


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def exported(root, tmp_path, name="exported", **changes):
    """The stored entry exported to ``tmp_path/name``, its manifest changed by ``changes``
    (the manifest is not hashed: the entry still verifies)."""
    (info,) = catalog.list_entries(root)
    out = catalog.export_entry(info, tmp_path / name)
    data = disk.read_manifest(out)
    data.update(changes)
    (out / disk.MANIFEST).write_text(json.dumps(data))
    return out


# -- (2) verify --delete and an unsafe cache folder ------------------------------------------
@pytest.mark.parametrize("folder", ["", "autotuner"])
def test_verify_delete_keeps_intact_entries_of_a_group_writable_folder(stored, capsys, folder):
    # umask 002, or a root made with mkdir -p: every intact entry used to be deleted, each
    # reported with the folder's problem
    root, store = stored
    unsafe = root / folder if folder else root
    unsafe.chmod(0o775)
    try:
        code, out, _ = run(capsys, "cache", "verify", "--delete")
        assert code == 1
        assert (
            store.entry_dir.is_dir() and disk.verify(store.entry_dir, check_folders=False) is None
        )
        assert out.count("writable by group or others (mode 775)") == 1
        assert f"chmod 700 {unsafe}" in out and "nothing was deleted" in out
        assert "BAD" not in out and "(deleted)" not in out and "0 bad" in out
        # a damaged entry is named, but nothing is deleted in an unsafe folder either
        (store.entry_dir / "latency.json").write_text("{}")
        code, out, _ = run(capsys, "cache", "verify", "--delete")
        assert code == 1 and f"BAD      autotuner/{store.key}: latency.json" in out
        assert "(deleted)" not in out and store.entry_dir.is_dir()
    finally:
        unsafe.chmod(0o700)
    code, out, _ = run(capsys, "cache", "verify", "--delete")  # fixed: deleted now
    assert code == 1 and "(deleted)" in out and not store.entry_dir.exists()


def test_verify_of_a_safe_cache_prints_no_folder_line(stored, capsys):
    code, out, _ = run(capsys, "cache", "verify", "-v")
    assert code == 0 and "UNSAFE" not in out and "ok       autotuner/" in out


# -- (4) import of a stale entry over a current one --------------------------------------------
def test_import_of_a_stale_entry_keeps_the_current_entry_of_its_key(stored, capsys, tmp_path):
    root, store = stored
    old = exported(root, tmp_path, tileauto="0.0.9")
    before = (store.entry_dir / disk.MANIFEST).read_bytes()
    with pytest.raises(CacheError, match="holds a current entry of this key"):
        catalog.import_entries(old, root, root / "tmp")
    code, out, err = run(capsys, "cache", "import", str(old))
    assert code == 1 and "not imported" in err and "tileauto 0.0.9" in err
    # a folder of entries: refused and counted, the others go on
    folder = tmp_path / "folder"
    folder.mkdir()
    old.rename(folder / "old")
    code, out, err = run(capsys, "cache", "import", str(folder))
    assert code == 1 and "not imported" in out and "1 of 1 entries" in err
    (info,) = catalog.list_entries(root)
    assert catalog.verify_entry(info) is None
    assert (store.entry_dir / disk.MANIFEST).read_bytes() == before


def test_a_stale_entry_still_replaces_a_stale_or_bad_one(stored, tmp_path):
    root, store = stored
    old = exported(root, tmp_path, tvm="0.1.0")
    (store.entry_dir / "latency.json").write_text("{}")  # the cache's entry does not verify
    ((kind, key, note),) = catalog.import_entries(old, root, root / "tmp")
    assert key == store.key and "tvm 0.1.0" in note and "will not be used" in note
    (info,) = catalog.list_entries(root)
    assert catalog.verify_entry(info).startswith("stale")


# -- (10) an older cache format is stale ------------------------------------------------------
def test_an_entry_of_an_older_format_is_stale_in_verify_and_on_import(stored, tmp_path, capsys):
    root, store = stored
    old = exported(root, tmp_path, format="2")
    other = tmp_path / "other"
    ((kind, key, note),) = catalog.import_entries(old, other, other / "tmp")
    assert "cache format 2" in note and "will not be used" in note
    (info,) = catalog.list_entries(other)
    problem = catalog.verify_entry(info)
    assert problem.startswith("stale") and "cache format 2" in problem
    code, out, _ = run(capsys, "cache", "verify", "--cache-dir", str(other))
    assert code == 1 and "1 bad" in out and "cache format 2" in out


def test_verify_delete_leaves_a_newer_installs_entries_alone(stored, tmp_path, capsys):
    # a cache folder shared by two installs: the older one's verify --delete deleted every
    # entry of the newer one (stale here, used there), a newer cache format's too
    root, store = stored
    other = tmp_path / "other"
    catalog.import_entries(exported(root, tmp_path), other, other / "tmp")
    (info,) = catalog.list_entries(other)
    manifest = disk.read_manifest(info.path)

    def rewrite(**changes):  # the manifest is not hashed: the entry's files still verify
        (info.path / disk.MANIFEST).write_text(json.dumps({**manifest, **changes}))
        (entry,) = catalog.list_entries(other)
        return entry

    for changes in ({"tileauto": "99.0"}, {"format": 99}, {"tvm": "1.0", "tileauto": "9.9"}):
        assert catalog.written_by_newer(rewrite(**changes)) is not None
        code, out, _ = run(capsys, "cache", "verify", "--delete", "--cache-dir", str(other))
        assert code == 0 and "0 bad, 1 of a newer install (left alone)" in out, out
        assert f"newer    autotuner/{store.key}: written by a newer install" in out
        assert info.path.is_dir()
    # older in one version and newer in another, or a version that does not parse: not newer
    for changes in ({"tileauto": "99.0", "tvm": "0.1.0"}, {"tileauto": "not a version"}):
        assert catalog.written_by_newer(rewrite(**changes)) is None
    code, out, _ = run(capsys, "cache", "verify", "--delete", "--cache-dir", str(other))
    assert code == 1 and "(deleted)" in out and not info.path.exists(), out


# -- (15) import and export copy the manifest's files only ------------------------------------
def test_import_and_export_copy_only_the_files_the_manifest_lists(stored, tmp_path):
    root, store = stored
    out = exported(root, tmp_path)
    (out / "unlisted.bin").write_bytes(b"not verified")
    (out / "kernel" / "extra.so").write_bytes(b"not verified")
    other = tmp_path / "other"
    catalog.import_entries(out, other, other / "tmp")
    entry = other / KIND_TUNED / store.key
    files = disk.read_manifest(entry)["files"]
    assert "unlisted.bin" not in files and "kernel/extra.so" not in files
    assert not (entry / "unlisted.bin").exists() and not (entry / "kernel" / "extra.so").exists()
    assert disk.verify(entry) is None
    # export too: a file added to a cache entry is not shipped
    (store.entry_dir / "notes.txt").write_text("mine")
    (info,) = catalog.list_entries(root)
    shipped = catalog.export_entry(info, tmp_path / "shipped")
    assert not (shipped / "notes.txt").exists()
    assert set(disk.read_manifest(shipped)["files"]) == set(files)


# -- (5) export DIR --trials FILE --------------------------------------------------------------
def test_export_dir_with_trials_inside_it(stored, capsys, tmp_path):
    root, store = stored
    ship = tmp_path / "ship"
    code, out, err = run(
        capsys, "cache", "export", store.key, str(ship), "--trials", str(ship / "t.json")
    )
    assert code == 0, err
    assert disk.verify(ship) is None
    assert json.loads((ship / "t.json").read_text())["format"] == catalog.TRIALS_FORMAT
    # the exported entry, the trials file beside it and all, imports as the entry alone
    other = tmp_path / "other"
    catalog.import_entries(ship, other, other / "tmp")
    assert not (other / KIND_TUNED / store.key / "t.json").exists()


def test_export_trials_named_as_a_file_of_the_entry_is_refused_before_writing(
    stored, capsys, tmp_path
):
    root, store = stored
    ship = tmp_path / "ship"
    argv = ("cache", "export", store.key, str(ship), "--trials", str(ship / "trials.json"))
    code, out, err = run(capsys, *argv)
    assert code == 2 and "a file of the exported entry itself (trials.json)" in err
    assert not ship.exists()


def test_export_trials_refuses_an_existing_file_and_a_link(stored, capsys, tmp_path):
    root, store = stored
    mine = tmp_path / "notes.json"
    mine.write_text("my notes")
    code, out, err = run(capsys, "cache", "export", store.key, "--trials", str(mine))
    assert code == 1 and "exists: give a new file" in err and mine.read_text() == "my notes"
    link = tmp_path / "link.json"
    link.symlink_to(mine)
    code, out, err = run(capsys, "cache", "export", store.key, "--trials", str(link))
    assert code == 1 and "symbolic link" in err and mine.read_text() == "my notes"
    assert link.is_symlink()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    code, out, err = run(capsys, "cache", "export", store.key, "--trials", str(dangling))
    assert code == 1 and not (tmp_path / "nowhere.json").exists()
    # refused before DIR is written
    code, out, err = run(
        capsys, "cache", "export", store.key, str(tmp_path / "d"), "--trials", str(mine)
    )
    assert code == 1 and not (tmp_path / "d").exists()


def test_export_trials_writes_a_new_file_whole_and_leaves_no_temp_file(stored, capsys, tmp_path):
    root, store = stored
    folder = tmp_path / "out"
    code, out, err = run(capsys, "cache", "export", store.key, "--trials", str(folder / "t.json"))
    assert code == 0, err
    assert [p.name for p in folder.iterdir()] == ["t.json"]
    assert json.loads((folder / "t.json").read_text())["key"] == store.key
    assert (folder / "t.json").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- (15) export to a link ---------------------------------------------------------------------
def test_export_to_a_link_to_an_empty_folder_writes_into_it_and_keeps_the_link(
    stored, capsys, tmp_path
):
    root, store = stored
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    code, out, err = run(capsys, "cache", "export", store.key, str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert disk.verify(target) is None
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    code, out, err = run(capsys, "cache", "export", store.key, str(dangling))
    assert code == 1 and "symbolic link" in err
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()


# -- (15) --cache-dir: after env, and its exit codes -------------------------------------------
def test_env_takes_cache_dir_after_the_command(capsys, tmp_path, tileauto_env):
    code, out, err = run(capsys, "env", "--cache-dir", str(tmp_path / "mine"))
    assert code == 0, err
    assert f"TILEAUTO_CACHE_DIR={tmp_path / 'mine'}" in out.splitlines()


def test_a_missing_cache_dir_is_a_usage_error_as_an_empty_one_is(capsys, tmp_path, tileauto_env):
    code, out, err = run(capsys, "cache", "list", "--cache-dir", str(tmp_path / "typo"))
    assert code == 2 and "no such folder" in err
    code, out, err = run(capsys, "cache", "list", "--cache-dir", "")
    assert code == 2


# -- (13) a closed output pipe -----------------------------------------------------------------
def test_a_reader_that_went_away_ends_the_command_quietly(tileauto_env, tmp_path):
    # `tileauto env | head -1` printed "tileauto: error: [Errno 32] Broken pipe", exit 1
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write: deterministic
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tileauto", "env"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == ""


def test_a_broken_pipe_that_is_not_stdout_is_an_error(capsys, monkeypatch, tileauto_env):
    def fails(args):
        raise BrokenPipeError(32, "Broken pipe")  # a socket's, say: stdout is fine

    monkeypatch.setattr(_command, "cmd_env", fails)
    code, out, err = run(capsys, "env")
    assert code == 1 and err.startswith("tileauto: error:") and "Broken pipe" in err


def test_ctrl_c_is_one_line_and_exit_130(capsys, monkeypatch, tileauto_env):
    def interrupted(args):
        raise KeyboardInterrupt  # what Ctrl-C raises in the middle of a command

    monkeypatch.setattr(_command, "cmd_env", interrupted)
    code, out, err = run(capsys, "env")
    assert (code, out, err) == (130, "", "tileauto: interrupted\n")


# -- (8) the last-resort error line ------------------------------------------------------------
def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(
    capsys, monkeypatch, tileauto_env
):
    def bug(args):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(_command, "cmd_env", bug)
    code, out, err = run(capsys, "env")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "tileauto: internal error: ZeroDivisionError: float division by zero (please report; "
        "--debug shows the traceback)"
    ]
    for argv in (["--debug", "env"], ["env", "--debug"]):
        with pytest.raises(ZeroDivisionError):
            cli.main(argv)


@pytest.mark.parametrize("verb", ["show", "export"])
def test_an_empty_key_is_a_usage_error(stored, capsys, tmp_path, verb):
    # `tileauto cache show "$KEY"` with KEY unset: exit 2 as a missing KEY, not 1 (not found)
    argv = ["cache", verb, " "] + ([str(tmp_path / "out")] if verb == "export" else [])
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"{verb}: expected KEY" in err and "got an empty one" in err
    assert not (tmp_path / "out").exists()
