"""The kernel cache's size limit: every config a tuning compiles is kept in ``kernels/`` (issue
38), so ``TILEAUTO_KERNELS_MAX_MB`` bounds it, deleting the entries used longest ago."""

from __future__ import annotations

import os
import time

import pytest

from tileauto.cache import hygiene
from tileauto.cache.kernels import KernelStore
from tileauto.settings import Settings

DAY = 86400.0


def entry(root, key, size, age_s):
    folder = root / "kernels" / key
    folder.mkdir(parents=True)
    (folder / "kernel.so").write_bytes(b"x" * size)
    (folder / "manifest.json").write_text("{}")
    then = time.time() - age_s
    os.utime(folder, (then, then))
    return folder


def settings(tmp_path, max_mb):
    return Settings.from_env(
        {"TILEAUTO_CACHE_DIR": str(tmp_path), "TILEAUTO_KERNELS_MAX_MB": str(max_mb)}
    )


def test_past_the_limit_the_entries_used_longest_ago_go_first(tmp_path):
    old = entry(tmp_path, "old", 400_000, 3 * DAY)
    middle = entry(tmp_path, "middle", 400_000, 2 * DAY)
    new = entry(tmp_path, "new", 400_000, DAY)
    in_use = entry(tmp_path, "in-use", 400_000, 0)  # loaded a moment ago: never deleted

    # 1.6 MB against a limit of 1 MiB: the two oldest go, whatever their names
    assert hygiene.prune_kernels(settings(tmp_path, 1)) == 2
    assert not old.exists() and not middle.exists()
    assert new.exists() and in_use.exists()
    assert hygiene.prune_kernels(settings(tmp_path, 1)) == 0  # under the limit now


def test_no_limit_and_a_cache_turned_off_delete_nothing(tmp_path):
    old = entry(tmp_path, "old", 400_000, 3 * DAY)
    assert hygiene.prune_kernels(settings(tmp_path, 0)) == 0
    off = Settings.from_env(
        {
            "TILEAUTO_CACHE_DIR": str(tmp_path),
            "TILEAUTO_KERNELS_MAX_MB": "0.1",
            "TILEAUTO_DISABLE_CACHE": "1",
        }
    )
    assert hygiene.prune_kernels(off) == 0
    assert old.exists()
    assert hygiene.prune_kernels(settings(tmp_path / "missing", 0.1)) == 0  # no kernels/ yet


def test_a_load_marks_its_entry_used(tmp_path):
    folder = entry(tmp_path, "k", 10, 3 * DAY)
    store = KernelStore(settings(tmp_path, 1), "k", {})
    with pytest.warns(RuntimeWarning, match="unusable"):
        assert store.load() is None  # not a valid entry: a miss, but touched
    assert time.time() - folder.stat().st_mtime < 3600
    assert KernelStore(settings(tmp_path, 1), "absent", {}).load() is None


def test_clearing_the_whole_cache_clears_the_key_memos(tmp_path):
    from tileauto.cache import catalog

    memos = {"installed": "a" * 32 + ".json", "sources": "b" * 64 + ".json"}  # by digest
    for name, memo in memos.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / memo).write_text("{}")
    catalog.clear(tmp_path, kinds=("kernels",))  # one kind only: the memos stay
    assert (tmp_path / "installed" / memos["installed"]).exists()
    catalog.clear(tmp_path)
    assert not any((tmp_path / name / memo).exists() for name, memo in memos.items())
