"""The kernel cache's size limit: every config a tuning compiles is kept in ``kernels/`` (issue
38), so ``TILEAUTO_KERNELS_MAX_MB`` bounds it, deleting the entries used longest ago."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from tileauto.cache import hygiene
from tileauto.cache.kernels import KernelStore
from tileauto.settings import Settings

DAY = 86400.0


def key(name: str) -> str:
    """A key (32 hex digits) made from a readable name, so that each test's entries are told
    apart by name; what the size limit looks at are keys only."""
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def entry(root, name, size, age_s):
    """A kernel entry of the real layout: the manifest at the top, the library and its
    description in ``kernel/`` below (the size limit used to count the top files alone)."""
    folder = root / "kernels" / key(name)
    (folder / "kernel").mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    (folder / "kernel" / "kernel.so").write_bytes(b"x" * size)
    (folder / "kernel" / "kernel.json").write_text("{}")
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


def test_an_entry_counts_by_its_whole_tree(tmp_path):
    # the library sits in kernel/ below the manifest: counting the top files alone read a
    # 2 GiB limit as about 200 GiB (a few hundred bytes of manifest per entry)
    old = entry(tmp_path, "old", 700_000, 2 * DAY)
    new = entry(tmp_path, "new", 700_000, DAY)
    assert hygiene.prune_kernels(settings(tmp_path, 1)) == 1
    assert not old.exists() and new.exists()


def test_only_folders_named_by_a_key_are_counted_or_deleted(tmp_path):
    # a folder of the user's in kernels/ (the CLI leaves such folders alone, as the docs
    # promise) was taken for an entry, and deleted, being the one used longest ago
    kept = entry(tmp_path, "kept", 400_000, DAY)
    big = entry(tmp_path, "big", 800_000, 2 * DAY)
    kernels = tmp_path / "kernels"
    notes = kernels / "my-notes"
    (notes / "drafts").mkdir(parents=True)
    (notes / "drafts" / "plot.bin").write_bytes(b"n" * 3_000_000)
    upper = kernels / key("upper").upper()  # not a key: keys are lowercase
    upper.mkdir()
    (upper / "data.bin").write_bytes(b"u" * 3_000_000)
    then = time.time() - 30 * DAY
    for folder in (notes, upper):
        os.utime(folder, (then, then))
    (kernels / key("a file")).write_bytes(b"f" * 3_000_000)  # a file named as a key: not an entry
    # the user's 9 MB do not count either: 1.2 MB of entries against 1 MiB, the oldest goes
    assert hygiene.prune_kernels(settings(tmp_path, 1)) == 1
    assert not big.exists() and kept.exists()
    assert (notes / "drafts" / "plot.bin").stat().st_size == 3_000_000
    assert (upper / "data.bin").exists() and (kernels / key("a file")).exists()
    assert hygiene.prune_kernels(settings(tmp_path, 0.1)) == 1  # past any limit: only entries go
    assert not kept.exists() and notes.is_dir() and upper.is_dir()


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
    store = KernelStore(settings(tmp_path, 1), key("k"), {})
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
