"""tileauto.result.shipping without a compiler: what save_to_disk replaces and what it refuses,
the names its manifest keeps, and what load_from_disk checks before it reads anything.

The "kernel" of a result is a folder of fake files (``cache_fakes``): nothing here loads it.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pathlib
import shutil
import sys
from pathlib import Path

import pytest

import tileauto
from tileauto.cache import disk
from tileauto.cache.entry import read_result
from tileauto.errors import CacheError
from tileauto.result._portability import recompile_factory
from tileauto.result.record import AutotuneResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))
from cache_fakes import fake_kernel, fake_result, open_store, trial  # noqa: E402

TRIALS = [trial(0, {"block": 8}), trial(1, {"block": 16})]
NAMES = ("kernel", "module", "problem_key", "family")


def _contents(folder: Path) -> dict[str, bytes | None]:
    """Every file's bytes (None for a folder) under ``folder``, by relative path."""
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
        for p in folder.rglob("*")
    }


def _refused(result: AutotuneResult, path: Path) -> str:
    """save_to_disk's CacheError for ``path``, after checking it left ``path`` as it was."""
    before = _contents(path)
    with pytest.raises(CacheError) as info:
        result.save_to_disk(path)
    assert _contents(path) == before
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    message = str(info.value)
    assert message.startswith(f"save_to_disk({str(path)!r}): ")
    return message


# -- what save_to_disk replaces ---------------------------------------------------------------------
def test_a_folder_with_a_manifest_of_its_own_is_not_a_result_and_is_left_as_it_is(tmp_path):
    app = tmp_path / "app"
    (app / "src").mkdir(parents=True)
    (app / "manifest.json").write_text('{"name": "my web app", "version": "1.0"}\n')
    (app / "src" / "main.py").write_text("print('my code')\n")
    (app / "README.md").write_text("my notes\n")
    message = _refused(fake_result(tmp_path, TRIALS), app)
    assert "is not a saved tileauto result" in message
    assert "kind None, format None" in message  # what its manifest.json is
    assert "README.md, manifest.json, src/" in message  # what is in the way
    assert "Give a new or empty folder" in message


@pytest.mark.parametrize(
    "manifest, why",
    [
        ("{not json", "manifest.json is unreadable"),
        ("[1, 2]", "manifest.json is not a JSON object"),
        ('{"format": "3", "kind": "kernels", "files": {}}', "kind 'kernels'"),
        ('{"format": "99", "kind": "autotuner", "files": {}}', "format '99'"),
        ('{"format": "3", "kind": "autotuner"}', "manifest.json lists no files"),
    ],
)
def test_a_manifest_that_is_not_a_tuned_results_is_refused(tmp_path, manifest, why):
    saved = fake_result(tmp_path, TRIALS).save_to_disk(tmp_path / "saved")
    (saved / "manifest.json").write_text(manifest)
    message = _refused(fake_result(tmp_path, TRIALS), saved)
    assert "is not a saved tileauto result" in message and why in message


def test_a_saved_result_is_replaced_only_while_it_holds_nothing_else(tmp_path):
    result = fake_result(tmp_path, TRIALS)
    saved = result.save_to_disk(tmp_path / "saved")
    (saved / "README.md").write_text("how we tuned this\n")
    (saved / "bench").mkdir()
    (saved / "bench" / "results.csv").write_text("n,ms\n")
    message = _refused(result, saved)
    assert "holds a saved tileauto result and more (README.md, bench/)" in message
    assert "move those out of it" in message
    (saved / "README.md").unlink()
    shutil.rmtree(saved / "bench")
    created = disk.read_manifest(saved)["created"]
    assert result.save_to_disk(saved) == saved  # the result alone: replaced
    assert disk.read_manifest(saved)["created"] != created
    assert disk.verify(saved, trusted_uids={os.getuid(), 0}) is None


def test_a_file_or_a_link_at_the_path_is_refused(tmp_path):
    result = fake_result(tmp_path, TRIALS)
    (tmp_path / "afile").write_text("mine\n")
    assert "a file is there, not a folder" in _refused(result, tmp_path / "afile")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert "a symbolic link is there" in _refused(result, tmp_path / "link")
    assert (tmp_path / "link").is_symlink()


def test_a_folder_that_cannot_be_written_is_named_by_the_users_path(tmp_path, monkeypatch):
    result = fake_result(tmp_path, TRIALS)
    locked = tmp_path / "ro"
    locked.mkdir()
    mkdir = pathlib.Path.mkdir

    def read_only(self, *args, **kwargs):  # the folder is read-only (whoever runs the test)
        if self.parent == locked:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    with pytest.raises(PermissionError) as info:
        result.save_to_disk(locked / "s")
    message = str(info.value)
    assert f"save_to_disk({str(locked / 's')!r})" in message
    assert f"(Permission denied: {locked})" in message and "nothing was saved" in message
    assert ".stage-" not in message  # a staging folder's name means nothing to the user
    assert list(locked.iterdir()) == []


# -- the names of the problem ------------------------------------------------------------------------
def test_a_saved_manifest_names_the_problem_as_its_cache_entry_does(tmp_path):
    store = open_store()
    result = fake_result(tmp_path, TRIALS)
    tuned = dataclasses.replace(result, key=store.save(result))  # as a new tuning returns it
    entry = disk.read_manifest(store.entry_dir)
    names = {name: entry[name] for name in NAMES}
    assert names["kernel"] == "factory" and names["module"] == "cache_fakes"
    saved = tuned.save_to_disk(tmp_path / "saved")
    assert {name: disk.read_manifest(saved).get(name) for name in NAMES} == names
    # read back (a cache hit, or a loaded folder), it keeps them with its entry gone
    loaded = AutotuneResult.from_stored(
        read_result(saved, disk.read_manifest(saved)), fake_kernel(tmp_path)
    )
    shutil.rmtree(store.entry_dir)
    again = loaded.save_to_disk(tmp_path / "again")
    assert {name: disk.read_manifest(again).get(name) for name in NAMES} == names


def test_a_result_the_cache_never_held_is_saved_under_its_kernels_name(tmp_path):
    saved = fake_result(tmp_path, TRIALS).save_to_disk(tmp_path / "saved")  # no key
    manifest = disk.read_manifest(saved)
    assert manifest["kernel"] == "main" and manifest["key"] is None
    assert not {"module", "problem_key", "family"} & set(manifest)


# -- load_from_disk's arguments -----------------------------------------------------------------------
def test_load_from_disk_refuses_a_factory_it_cannot_call_before_reading_the_folder(tmp_path):
    saved = fake_result(tmp_path, TRIALS).save_to_disk(tmp_path / "saved")  # cannot load here
    with pytest.raises(TypeError) as info:
        AutotuneResult.load_from_disk(saved, factory="addone")
    message = str(info.value)
    assert message.startswith("load_from_disk(factory=...) must be the kernel's @jit factory")
    assert "got str 'addone'" in message


def test_an_autotune_or_jit_factory_stands_for_the_function_it_wraps():
    def kernel(n, vec=4):
        return n * vec

    jitted = tileauto.jit(out_idx=[-1])(kernel)
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}])(jitted)
    assert recompile_factory(tuned) is kernel  # calling it would tune: never called
    assert recompile_factory(jitted) is kernel
    assert recompile_factory(kernel) is kernel
    assert recompile_factory(None) is None
    assert tuned.results == {}


def test_load_from_disk_says_what_is_at_the_path_when_it_is_no_folder(tmp_path):
    (tmp_path / "afile").write_text(json.dumps({"not": "a folder"}))
    with pytest.raises(CacheError) as info:
        AutotuneResult.load_from_disk(tmp_path / "afile")
    message = str(info.value)
    assert message.startswith(f"load_from_disk({str(tmp_path / 'afile')!r}): a file, not a folder")
    assert "replaced" not in message  # a load replaces nothing
    with pytest.raises(CacheError, match=r"'\): no such folder: give the folder save_to_disk"):
        AutotuneResult.load_from_disk(tmp_path / "missing")


def test_load_from_disk_names_an_unknown_compile_args_field(tmp_path):
    """It was CompileArgs.__init__'s TypeError, which named neither compile_args nor the
    fields it takes."""
    from tileauto.result.shipping import _compile_args

    with pytest.raises(TypeError, match=r"compile_args: \['foo'\] is not a field .*'out_idx'"):
        _compile_args({"foo": 1, "out_idx": [-1]})
    assert _compile_args({"out_idx": [-1]}).out_idx == (-1,)


@pytest.mark.parametrize("path", [None, 3])
def test_a_path_that_is_no_path_is_named(tmp_path, path):
    result = fake_result(tmp_path, TRIALS)
    with pytest.raises(TypeError, match=r"save_to_disk: path must be a folder's path .*, not "):
        result.save_to_disk(path)
    with pytest.raises(TypeError, match=r"load_from_disk: path must be a folder's path .*, not "):
        AutotuneResult.load_from_disk(path)
