"""tileauto.cache.catalog: listing, finding, clearing, exporting and importing entries."""

from __future__ import annotations

import json

import pytest
from cache_fakes import fake_result, open_store, trial

from tileauto.cache import catalog, disk
from tileauto.cache.entry import KIND_TUNED
from tileauto.cli import format_age, format_size, parse_age
from tileauto.errors import CacheError


@pytest.fixture
def stored(tmp_path, tileauto_env):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8}, 0.5), trial(1, {"block": 16})]))
    return tileauto_env, store


def test_list_reads_manifests_and_latency(stored):
    root, store = stored
    (info,) = catalog.list_entries(root)
    assert (info.kind, info.key, info.kernel) == (KIND_TUNED, store.key, "factory")
    assert info.target == "llvm test" and info.latency_ms == 0.5 and info.size_bytes > 0
    assert catalog.verify_entry(info) is None


def test_partial_entries_are_listed_as_unreadable_and_staging_is_not_listed(stored):
    root, store = stored
    (store.entry_dir / disk.MANIFEST).unlink()
    (root / "autotuner" / ".stage-123").mkdir()
    (info,) = catalog.list_entries(root)
    assert not info.readable and info.kernel == "?"
    assert "no readable manifest" in catalog.verify_entry(info)


def test_find_entry_by_prefix(stored):
    root, store = stored
    assert catalog.find_entry(root, store.key[:6].upper()).key == store.key
    with pytest.raises(CacheError, match="no cache entry"):
        catalog.find_entry(root, "zzzz")


def test_clear_by_age_also_clears_old_measurements(stored):
    root, store = stored
    assert catalog.clear(root, older_than_s=3600) == (0, 0)
    assert store.measure_dir.is_dir()
    count, size = catalog.clear(root)
    assert count == 1 and size > 0
    assert catalog.list_entries(root) == [] and not store.measure_dir.exists()


def test_export_import_round_trip_and_keyless_folders(stored, tmp_path):
    root, store = stored
    (info,) = catalog.list_entries(root)
    out = catalog.export_entry(info, tmp_path / "exported")
    assert disk.verify(out) is None
    assert json.loads((out / disk.MANIFEST).read_text())["key"] == store.key
    other = tmp_path / "other"
    done = catalog.import_entries(out, other, other / "tmp")
    assert done == [(KIND_TUNED, store.key, None)]
    assert disk.verify(other / KIND_TUNED / store.key) is None
    data = disk.read_manifest(out)
    data["key"] = None
    (out / disk.MANIFEST).write_text(json.dumps(data))
    with pytest.raises(CacheError, match="has no cache key"):
        catalog.import_entries(out, other, other / "tmp")


def test_import_reports_entries_from_other_versions(stored, tmp_path):
    root, store = stored
    (info,) = catalog.list_entries(root)
    out = catalog.export_entry(info, tmp_path / "exported")
    data = disk.read_manifest(out)
    data["tvm"] = "0.1.0"
    (out / disk.MANIFEST).write_text(json.dumps(data))
    ((kind, key, note),) = catalog.import_entries(out, tmp_path / "c", tmp_path / "c" / "tmp")
    assert "tvm 0.1.0" in note and "will not be used" in note


@pytest.mark.parametrize(
    "text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800)]
)
def test_parse_age(text, seconds):
    assert parse_age(text) == seconds


def test_formatting_helpers():
    assert format_age(5) == "5s" and format_age(7200) == "2h" and format_age(3 * 86400) == "3d"
    assert format_size(100) == "100 B" and format_size(2048) == "2.0 KiB"
