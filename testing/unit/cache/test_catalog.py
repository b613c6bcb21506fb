"""tileauto.cache.catalog: listing, finding, clearing, exporting and importing entries."""

from __future__ import annotations

import argparse
import json

import pytest
from cache_fakes import fake_result, open_store, trial

from tileauto.cache import catalog, disk
from tileauto.cache.entry import KIND_TUNED
from tileauto.cli._base import format_age, format_size, parse_age
from tileauto.errors import CacheError
from tileauto.records import Trial, TrialStatus


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


def test_the_plan_of_clear_lists_measurements_and_memos_and_only_tileauto_names(stored):
    root, store = stored
    (root / "installed").mkdir()
    memo = root / "installed" / ("a" * 32 + ".json")
    memo.write_text("{}")
    mine = [root / "installed" / "notes.json", root / "measurements" / "run1" / "bench.csv"]
    mine.append(root / "autotuner" / "my-entry" / "manifest.json")
    for path in mine:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the user's")
    plan = catalog.clear_plan(root)
    paths = {item.path for item in plan}
    assert {store.entry_dir, store.base_dir, memo} <= paths  # and the key's source memos:
    assert all(
        p.parent == root / "sources" for p in paths - {store.entry_dir, store.base_dir, memo}
    )
    assert [item.entry.key for item in plan if item.entry is not None] == [store.key]
    count, size = catalog.clear(root)
    assert count == 1 and size == sum(item.size_bytes for item in plan)
    assert not memo.exists() and all(path.read_text() == "the user's" for path in mine)


@pytest.mark.parametrize("created", [float("nan"), 1e300, -5.0, "yesterday"])
def test_a_damaged_creation_time_reads_as_the_folders_time(stored, created):
    root, store = stored
    path = store.entry_dir / disk.MANIFEST
    data = json.loads(path.read_text())
    data["created"] = created  # the manifest's own fields are not hashed
    path.write_text(json.dumps(data))
    (info,) = catalog.list_entries(root)
    assert info.created == store.entry_dir.stat().st_mtime and catalog.verify_entry(info) is None


def test_read_trials_gives_the_trials_the_default_and_the_winner(tmp_path, tileauto_env):
    trials = [
        trial(0, {"block": 8}, 0.9),
        trial(1, {"block": 16}, 0.4),
        trial(2, {"block": 32}, status=TrialStatus.COMPILE_ERROR),
    ]
    store = open_store(space=[t.config for t in trials])
    store.save(fake_result(tmp_path, trials, best=1))
    (info,) = catalog.list_entries(tileauto_env)
    records = catalog.read_trials(info)
    assert records.trials == tuple(trials) and records.default == trials[-1]
    assert records.best_index == 1 and records.best_config == {"block": 16}
    assert records.tuning_s == 1.5


def test_trials_document_is_self_describing_and_reads_back(stored):
    root, store = stored
    (info,) = catalog.list_entries(root)
    doc = json.loads(json.dumps(catalog.trials_document(info)))  # plain JSON throughout
    assert doc["format"] == catalog.TRIALS_FORMAT == "tileauto-trials/1"
    assert (doc["kernel"], doc["key"], doc["kind"]) == ("factory", store.key, KIND_TUNED)
    assert doc["device"] == {"kind": "cpu", "mcpu": "test"} and "llvm" in doc["target"]
    assert doc["best_index"] == 0 and doc["best_config"] == {"block": 8}
    first, second = doc["trials"]
    assert {"index", "config", "status", "latency_ms", "compile_s", "run_s", "error"} <= set(first)
    assert (first["index"], first["status"], first["latency_ms"]) == (0, "ok", 0.5)
    assert (first["compile_s"], first["run_s"], first["error"]) == (0.1, 0.2, None)
    assert second["config"] == {"block": 16} and second["latency_ms"] == 1.0
    assert Trial.from_json(first) == catalog.read_trials(info).trials[0]
    assert doc["default"]["index"] == 1


def test_read_trials_refuses_kernel_entries_and_unreadable_records(stored):
    root, store = stored
    (info,) = catalog.list_entries(root)
    (info.path / "trials.json").write_text("{not json")
    with pytest.raises(CacheError, match="does not verify .trials.json does not match its sha256"):
        catalog.read_trials(info)
    kernel = catalog.EntryInfo("kernels", "0" * 32, info.path, None, 0, 0.0)
    with pytest.raises(CacheError, match="no trials"):
        catalog.read_trials(kernel)


def test_every_reader_refuses_records_edited_after_they_were_written(stored):
    root, store = stored
    (info,) = catalog.list_entries(root)
    records = json.loads((info.path / "trials.json").read_text())
    records["trials"][1]["latency"]["median"] = 0.001  # valid JSON, a better latency
    (info.path / "trials.json").write_text(json.dumps(records))
    latency = json.loads((info.path / "latency.json").read_text())
    (info.path / "latency.json").write_text(json.dumps({**latency, "latency_ms": 0.001}))
    for read in (catalog.read_trials, catalog.trials_document):
        with pytest.raises(CacheError, match=r"does not verify \(.* does not match its sha256"):
            read(info)
    (info,) = catalog.list_entries(root)
    assert info.latency_ms is None  # `cache list` shows no latency it cannot vouch for
    with pytest.raises(CacheError, match="latency.json does not match its sha256"):
        catalog.read_record(info, "latency.json")


def test_clear_leaves_the_staging_dir_to_hygiene(stored):
    root, _ = stored
    scratch = root / "tmp" / "tune-0123456789ab"
    scratch.mkdir(parents=True)
    catalog.clear(root)
    assert scratch.is_dir()


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
    "text, seconds", [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600)]
)
def test_parse_age(text, seconds):
    assert parse_age(text) == seconds


def test_an_age_without_its_unit_is_refused():
    # --older-than 30 meant as days deleted every entry older than 30 seconds
    with pytest.raises(argparse.ArgumentTypeError, match="'30' has no unit: write 30d for days"):
        parse_age("30")


def test_formatting_helpers():
    assert format_age(5) == "5s" and format_age(7200) == "2h" and format_age(3 * 86400) == "3d"
    assert format_size(100) == "100 B" and format_size(2048) == "2.0 KiB"
