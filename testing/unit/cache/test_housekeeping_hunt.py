"""Cache housekeeping found wanting by a bug hunt, each kept fixed.

``cache clear --logs`` that cannot delete a log says so and fails (it said "deleted 0 logs"
and exited 0); ``cache prior`` that writes no entry fails (it said "0 entries ... written" and
exited 0); ``cache import`` of a whole cache root imports its entries (it said the folder held
none); ``save_to_disk("")`` is refused, not read as the working directory. The kernel cache's
size limit is in ``test_prune_kernels.py``.

The tests run as root on the test machines, where permissions deny nothing: a log that cannot
be deleted is an ``os.unlink`` that raises, as a read-only folder makes it for other users (the
real folder is tried too, when not root).
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from cache_fakes import DEVICE, TARGET, fake_kernel, fake_result, open_store, trial

from tileauto import cli
from tileauto.cache import catalog, hygiene
from tileauto.cache.kernels import KernelStore
from tileauto.cache.priors import export_prior
from tileauto.errors import CacheError
from tileauto.settings import Settings

DAY = 86400.0
SPACE = [{"block": b} for b in (8, 16, 32)]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def no_such_pid() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


# -- clear --logs: a log it cannot delete ------------------------------------------------------
def write_logs(folder: Path) -> list[Path]:
    """Four logs of ended runs, two days old (none in use): three in ``folder``, one in
    ``folder/workers``."""
    (folder / "workers").mkdir(parents=True)
    dead = no_such_pid()
    then = time.time() - 2 * DAY
    paths = [folder / f"autotune-gemm-20250101-12000{i}-{dead}.jsonl" for i in range(3)]
    paths.append(folder / "workers" / f"tileauto-worker-compile-0-{dead}.log")
    for path in paths:
        path.write_bytes(b"l" * 100)
        os.utime(path, (then, then))
    return paths


@pytest.fixture
def logs(tmp_path, monkeypatch):
    """:func:`write_logs` in ``TILEAUTO_LOG_DIR``."""
    folder = tmp_path / "logs"
    monkeypatch.setenv("TILEAUTO_LOG_DIR", str(folder))
    return folder, write_logs(folder)


def unlink_refused(monkeypatch, folder: Path, error: type[OSError] = PermissionError) -> None:
    """``os.unlink`` of anything under ``folder`` fails as a read-only folder makes it fail."""
    real = os.unlink

    def unlink(path, *args, **kwargs):
        if Path(path).is_relative_to(folder):
            raise error(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)


def test_clear_logs_that_cannot_be_deleted_says_so_and_fails(logs, monkeypatch, capsys):
    folder, paths = logs
    code, out, _ = run(capsys, "cache", "clear", "--logs", "--dry-run")
    assert code == 0 and "would delete 4 logs" in out
    unlink_refused(monkeypatch, folder)
    code, out, err = run(capsys, "cache", "clear", "--logs")
    assert code == 1, out + err
    assert "deleted 0 logs" in out  # what it did, then why it failed
    assert "could not delete 4 logs" in err and "Permission denied" in err
    assert str(paths[0]) in err  # the first one, named
    assert all(p.is_file() for p in paths)


def test_clear_logs_reports_the_logs_it_could_not_delete(logs, monkeypatch):
    folder, paths = logs
    unlink_refused(monkeypatch, folder / "workers")  # the others are deleted still
    failed: list[tuple[hygiene.LogFile, OSError]] = []
    deleted, kept = hygiene.clear_logs(folder, failed=failed)
    assert sorted(item.path for item in deleted) == sorted(paths[:3]) and kept == []
    ((item, exc),) = failed
    assert item.path == paths[3] and isinstance(exc, PermissionError) and paths[3].is_file()
    # without a list to report them in, a failure is an error, which says what was deleted
    monkeypatch.undo()
    unlink_refused(monkeypatch, folder)
    for path in paths[:3]:
        path.write_bytes(b"again")
        os.utime(path, (0, 0))
    with pytest.raises(
        CacheError, match=r"could not delete 4 logs: .*Permission denied.*0 deleted"
    ):
        hygiene.clear_logs(folder)


def test_a_log_already_gone_is_no_failure(logs, monkeypatch, capsys):
    # another process (a tuning's prune) deleted it first: it is gone, as asked
    folder, paths = logs
    real = os.unlink

    def raced(path, *args, **kwargs):
        real(path, *args, **kwargs)
        return real(path, *args, **kwargs)  # FileNotFoundError: deleted meanwhile

    monkeypatch.setattr(os, "unlink", raced)
    code, out, err = run(capsys, "cache", "clear", "--logs")
    assert code == 0 and "deleted 4 logs" in out and err == ""
    assert not any(p.exists() for p in paths)


def test_clear_logs_in_a_read_only_folder_reports_each_log(tmp_path):
    # the real case: a folder this user may not write. Root may write any: as root, the logs
    # are given to a second user, who clears them (under the system temp dir, which the second
    # user reaches; pytest's is 0700)
    shared = Path(tempfile.mkdtemp(prefix="tileauto-logs-")) if os.geteuid() == 0 else tmp_path
    shared.chmod(0o755)
    folder = shared / "logs"
    paths = write_logs(folder)
    folder.chmod(0o555)  # workers/ stays writable: its log goes, the three others cannot

    def clear() -> int:
        failed: list[tuple[hygiene.LogFile, OSError]] = []
        deleted, _ = hygiene.clear_logs(folder, failed=failed)
        ok = [d.path for d in deleted] == [paths[3]] and len(failed) == 3
        return 0 if ok and all(isinstance(exc, PermissionError) for _, exc in failed) else 1

    try:
        if os.geteuid() == 0:
            from second_user import OTHER_UID, as_second_user

            for path in (folder, folder / "workers", *paths):
                os.chown(path, OTHER_UID, OTHER_UID)
            code = as_second_user(clear)
        else:
            code = clear()
        assert code == 0
        assert all(p.is_file() for p in paths[:3]) and not paths[3].exists()
    finally:
        folder.chmod(0o700)
        if shared != tmp_path:
            shutil.rmtree(shared, ignore_errors=True)


# -- cache prior: nothing written --------------------------------------------------------------
def tuned(tmp_path, n: int):
    store = open_store(space=SPACE, args=(64 + n,))
    store.save(fake_result(tmp_path, [trial(i, c, 1.0 + i) for i, c in enumerate(SPACE)]))
    return store


def test_prior_fails_when_no_entry_could_be_written(tmp_path, tileauto_env, capsys):
    stores = [tuned(tmp_path, n) for n in range(2)]
    for store in stores:  # edited after it was written: it no longer verifies
        (store.entry_dir / "trials.json").write_text('{"trials": []}')
    out = tmp_path / "priors"
    with pytest.raises(CacheError, match=r"none of the 2 tuned entries of 'factory'"):
        export_prior(tileauto_env, "factory", out)
    assert not out.exists()  # made for the prior, and left empty: removed again
    capsys.readouterr()
    code, stdout, err = run(capsys, "cache", "prior", "factory", str(out))
    assert code == 1 and "written to" not in stdout and "pass it as prior" not in stdout
    assert "none of the 2 tuned entries of 'factory' could be written" in err
    assert "does not verify" in err  # why, from the first one skipped
    assert err.count("\nskipped ") + err.startswith("skipped ") == 2  # each named
    # a folder that was there before is the user's: kept
    out.mkdir()
    assert run(capsys, "cache", "prior", "factory", str(out))[0] == 1 and out.is_dir()
    # with one entry that verifies, it is written and the others are named: no failure
    good = tuned(tmp_path, 2)
    code, stdout, err = run(capsys, "cache", "prior", "factory", str(out))
    assert code == 0 and "1 entries of factory written" in stdout
    assert all(f"skipped {store.key}" in err for store in stores)
    (path,) = out.iterdir()
    with gzip.open(path, "rt") as file:
        assert json.load(file)["key"] == good.key


# -- cache import of a whole cache root ---------------------------------------------------------
def test_import_of_a_cache_root_imports_its_entries_of_both_kinds(tmp_path, tileauto_env, capsys):
    source = tileauto_env  # the env's cache: one tuned entry and one kernel entry
    store = tuned(tmp_path, 0)
    kernel = KernelStore.at(Settings.from_env(), "c" * 32, "k", target=TARGET, device=DEVICE)
    assert kernel.save(fake_kernel(tmp_path).artifact)
    (source / "kernels" / "my-notes").mkdir()  # a folder of the user's: not an entry
    (source / "kernels" / "my-notes" / "manifest.json").write_text("{}")
    target = tmp_path / "other-cache"
    code, out, err = run(capsys, "cache", "import", str(source), "--cache-dir", str(target))
    assert code == 0, out + err
    assert f"imported autotuner/{store.key}" in out and f"imported kernels/{'c' * 32}" in out
    assert "holds no tileauto entry" not in err
    imported = {(e.kind, e.key) for e in catalog.list_entries(target)}
    assert imported == {("autotuner", store.key), ("kernels", "c" * 32)}
    assert all(catalog.verify_entry(e) is None for e in catalog.list_entries(target))
    assert not (target / "kernels" / "my-notes").exists()


def test_import_of_a_cache_root_names_each_entry_it_refuses(tmp_path, tileauto_env, capsys):
    source = tileauto_env
    good, bad = tuned(tmp_path, 0), tuned(tmp_path, 1)
    (bad.entry_dir / "latency.json").write_text("{}")
    target = tmp_path / "other-cache"
    code, out, err = run(capsys, "cache", "import", str(source), "--cache-dir", str(target))
    assert code == 1 and "1 of 2 entries" in err
    assert f"imported autotuner/{good.key}" in out and f"not imported {bad.entry_dir}" in out


def test_a_cache_root_without_entries_and_the_cache_itself_are_refused(tmp_path, tileauto_env):
    root = tmp_path / "project"
    (root / "kernels" / "not-a-key").mkdir(parents=True)  # a project's own kernels/ folder
    (root / "kernels" / "not-a-key" / "manifest.json").write_text("{}")
    with pytest.raises(CacheError, match="holds no tileauto entry"):
        catalog.import_entries(root, tmp_path / "c", tmp_path / "c" / "tmp")
    tuned(tmp_path, 0)
    with pytest.raises(CacheError, match="is the cache itself"):
        catalog.import_entries(tileauto_env, tileauto_env, tileauto_env / "tmp")


# -- save_to_disk("") ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["save_to_disk", "load_from_disk"])
def test_an_empty_path_is_refused_not_read_as_the_working_directory(tmp_path, monkeypatch, method):
    # the working directory is empty: "" used to save the result into it
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = fake_result(tmp_path, [trial(0, {"block": 8})])
    call = getattr(result, method) if method == "save_to_disk" else type(result).load_from_disk
    with pytest.raises(ValueError, match=rf"{method}: path is empty"):
        call("")
    assert os.listdir(work) == []  # nothing written in the working directory
