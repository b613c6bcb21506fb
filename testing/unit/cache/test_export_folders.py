"""Writing a shipped folder into one the user already has: ``cache export`` and ``save_to_disk``
into an existing empty folder (the working directory, a mount point, a shared setgid folder, a
link to one) write into it and keep it; ``cache import`` of a link; the paths ``export`` and
``--trials`` refuse, named for what is really in the way.
"""

from __future__ import annotations

import errno
import os
import stat

import pytest
from cache_fakes import fake_result, open_store, trial

from tileauto import cli
from tileauto.cache import catalog, disk
from tileauto.cache.entry import KIND_TUNED
from tileauto.errors import CacheError

TRIALS = [trial(0, {"block": 8}, 0.5), trial(1, {"block": 16})]


@pytest.fixture
def stored(tmp_path, tileauto_env):
    store = open_store()
    store.save(fake_result(tmp_path, TRIALS))
    (info,) = catalog.list_entries(tileauto_env)
    return info


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def imports(folder, tmp_path) -> bool:
    """Whether ``cache import`` takes ``folder`` whole (its hashes checked) into a new cache."""
    other = tmp_path / "other-cache"
    done = catalog.import_entries(folder, other, other / "tmp")
    return [kind for kind, _, _ in done] == [KIND_TUNED]


def test_export_into_an_empty_folder_keeps_the_folder_and_its_mode(stored, tmp_path):
    # a shared folder (setgid, group-only) became a new drwxr-xr-x one, another inode
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o2750)
    before = folder.stat()
    assert catalog.export_entry(stored, folder) == folder
    after = folder.stat()
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert (folder / disk.MANIFEST).is_file() and imports(folder, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if ".stage" in p.name) == []
    assert not [p for p in folder.rglob("*") if p.name.startswith(".")]


def test_export_through_a_link_writes_into_the_folder_it_names(stored, tmp_path):
    folder = tmp_path / "target"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder)
    inode = folder.stat().st_ino
    catalog.export_entry(stored, link)
    assert link.is_symlink() and folder.stat().st_ino == inode
    assert imports(link, tmp_path)


def test_export_to_the_working_directory_leaves_it_usable(stored, capsys, tmp_path, monkeypatch):
    # `cd ex && tileauto cache export KEY .` said "exported" and left the shell in a
    # deleted folder: the export had replaced it
    here = tmp_path / "ex"
    here.mkdir()
    monkeypatch.chdir(here)
    code, out, err = run(capsys, "cache", "export", stored.key, ".")
    assert code == 0 and f"to {here}" in out, err
    assert disk.MANIFEST in os.listdir(".")
    with open("notes.txt", "w") as f:  # the working directory is still there
        f.write("mine")
    assert os.stat(".").st_ino == here.stat().st_ino


def test_save_to_disk_into_the_working_directory_leaves_it_usable(tmp_path, monkeypatch):
    here = tmp_path / "dot"
    here.mkdir()
    monkeypatch.chdir(here)
    result = fake_result(tmp_path, TRIALS)
    assert result.save_to_disk(".") == here
    assert disk.MANIFEST in os.listdir(".") and os.stat(".").st_ino == here.stat().st_ino


def test_an_empty_mount_point_is_written_into(stored, tmp_path, monkeypatch):
    # a mount point cannot be renamed (EBUSY, said of an internal staging path): here the
    # folder refuses to be renamed as one does, and the export writes into it all the same
    folder = tmp_path / "vol"
    folder.mkdir()
    rename = os.rename

    def mount_point_rename(src, dst, *args, **kwargs):
        if os.fspath(dst) == str(folder) or os.fspath(src) == str(folder):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), src, None, dst)
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", mount_point_rename)
    monkeypatch.setattr(disk, "_exchange", lambda a, b: False)  # as rename, through libc
    catalog.export_entry(stored, folder)
    assert imports(folder, tmp_path)


def test_a_failed_write_into_a_folder_leaves_it_as_empty_as_it_was(stored, tmp_path, monkeypatch):
    folder = tmp_path / "ship"
    folder.mkdir()
    rename_new = disk._rename_new

    def no_manifest(src, dst):
        if dst.name == disk.MANIFEST:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        rename_new(src, dst)

    monkeypatch.setattr(disk, "_rename_new", no_manifest)
    with pytest.raises(CacheError, match=f"cannot write {folder}: No space left"):
        catalog.export_entry(stored, folder)
    assert folder.is_dir() and os.listdir(folder) == []


def test_a_file_that_appears_meanwhile_is_never_replaced(stored, tmp_path, monkeypatch):
    folder = tmp_path / "ship"
    folder.mkdir()
    rename_new = disk._rename_new

    def someone_writes(src, dst):
        if dst.name == "trials.json":
            dst.write_text("someone else's")
        rename_new(src, dst)

    monkeypatch.setattr(disk, "_rename_new", someone_writes)
    with pytest.raises(CacheError, match=f"cannot write {folder}: File exists"):
        catalog.export_entry(stored, folder)
    assert os.listdir(folder) == ["trials.json"]
    assert (folder / "trials.json").read_text() == "someone else's"


def test_export_warns_of_a_folder_others_may_write(stored, capsys, tmp_path):
    folder = tmp_path / "group"
    folder.mkdir()
    folder.chmod(0o2770)
    code, out, _ = run(capsys, "cache", "export", stored.key, str(folder))
    assert code == 0 and "warning: the folder is writable by group or others (mode 2770)" in out
    assert stat.S_IMODE(folder.stat().st_mode) == 0o2770
    code, out, _ = run(capsys, "cache", "export", stored.key, str(tmp_path / "new"))
    assert code == 0 and "warning" not in out


def test_import_follows_the_link_it_is_given(stored, capsys, tmp_path, monkeypatch):
    # it said "a symbolic link sits at the entry path, not an entry folder; it will be
    # replaced; not imported", the cache verify text
    folder = catalog.export_entry(stored, tmp_path / "F")
    (tmp_path / "Flink").symlink_to(folder)
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "other"))
    code, out, err = run(capsys, "cache", "import", str(tmp_path / "Flink"))
    assert code == 0 and f"imported {KIND_TUNED}/{stored.key}" in out, err
    assert disk.verify(tmp_path / "other" / KIND_TUNED / stored.key) is None
    many = tmp_path / "many"
    many.mkdir()
    (many / "l").symlink_to(folder)  # a link inside the folder imported: refused, and said so
    code, out, err = run(capsys, "cache", "import", str(many))
    assert code == 1 and "a symbolic link to" in out and "import the folder it names" in out
    assert "will be replaced" not in out + err


def test_export_names_the_file_in_the_way(stored, capsys, tmp_path):
    (tmp_path / "afile").write_text("mine")
    code, _, err = run(capsys, "cache", "export", stored.key, str(tmp_path / "afile" / "x"))
    assert code == 1 and f"{tmp_path / 'afile'} is a file, not a folder" in err, err
    assert "File exists" not in err and (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize(
    ("trials", "said"),
    [
        ("kernel/trials-export.json", None),
        ("kernel", "is a folder of the exported entry itself (kernel)"),
        ("trials.json", "is a file of the exported entry itself (trials.json)"),
        ("kernel/kernel.so", "is a file of the exported entry itself (kernel/kernel.so)"),
        ("trials.json/t.json", "is inside trials.json, a file of the exported entry"),
    ],
)
def test_trials_inside_dir_are_refused_only_where_the_entry_writes(
    stored, capsys, tmp_path, trials, said
):
    # DIR/kernel/trials-export.json was refused as "a file of the exported entry itself"
    ship = tmp_path / "E9"
    code, out, err = run(
        capsys, "cache", "export", stored.key, str(ship), "--trials", str(ship / trials)
    )
    if said is None:
        assert code == 0 and (ship / trials).is_file() and imports(ship, tmp_path), err
    else:
        assert code == 2 and said in err and not ship.exists(), err


def test_publish_writes_through_a_link_to_an_empty_folder_and_keeps_the_link(tmp_path):
    # what save_to_disk and export reach: write_entry(shared=True), the link given as is
    folder = tmp_path / "target"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder)

    def fill(out):
        (out / "a.txt").write_text("a")

    disk.write_entry(link, fill, {"format": "3"}, tmp_path / "staging", shared=True)
    assert link.is_symlink() and sorted(os.listdir(folder)) == ["a.txt", disk.MANIFEST]
    assert disk.verify(folder, trusted_uids={os.getuid()}) is None
