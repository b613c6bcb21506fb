"""Records whose hashes verify but which hold the wrong JSON value: a miss or a refusal with
the file named, never a crash (the shipping hunt: ``[]`` in best_config.json crashed a
tuning, ``cache show`` and ``load_from_disk`` with AttributeError)."""

from __future__ import annotations

import hashlib
import json

import pytest
from cache_fakes import fake_result, open_store, trial

from tileauto import cli
from tileauto.artifact import KernelArtifact
from tileauto.cache import disk
from tileauto.cache.entry import KERNEL_DIR, read_result


def _rewrite(entry, name, value):
    """Write ``value`` into the entry's ``name`` and sign the manifest again, as another writer
    of the format (or a hand) would: the hashes verify."""
    (entry / name).write_text(json.dumps(value))
    manifest = disk.read_manifest(entry)
    for rel in manifest["files"]:
        manifest["files"][rel] = hashlib.sha256((entry / rel).read_bytes()).hexdigest()
    (entry / disk.MANIFEST).write_text(json.dumps(manifest))
    assert disk.verify(entry, check_folders=False) is None


KERNEL_JSON = f"{KERNEL_DIR}/{KernelArtifact.META}"


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("best_config.json", [], "best_config.json: expected a JSON object, got list"),
        ("latency.json", None, "latency.json: expected a JSON object, got NoneType"),
        ("trials.json", {"trials": [[1]]}, "latency.json or trials.json: malformed"),
        ("best_config.json", {"config": {"a": 1}, "__literal__": 3}, None),  # a literal ignored
        (KERNEL_JSON, "text", "kernel.json: expected a JSON object, got str"),
    ],
)
def test_a_record_of_the_wrong_shape_is_a_miss_never_a_crash(
    tmp_path, tileauto_env, capsys, name, value, said
):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8}, 0.5), trial(1, {"block": 16})]))
    _rewrite(store.entry_dir, name, value)
    manifest = disk.read_manifest(store.entry_dir)
    if said is None:  # what JSON gives back is used
        assert read_result(store.entry_dir, manifest).config == {"a": 1}
        return
    with pytest.raises(ValueError, match=said):
        read_result(store.entry_dir, manifest)
    with pytest.warns(RuntimeWarning, match=f"is unusable: unreadable records .*{said[:20]}"):
        assert open_store().load() is None  # a miss: the tuning runs again
    assert cli.main(["cache", "show", store.key[:12]]) == 1  # shown, with its problem
    shown = capsys.readouterr()
    assert "internal error" not in shown.err and "unreadable records" in shown.out
    assert cli.main(["cache", "verify"]) == 1  # it said "0 bad"
    assert f"BAD      autotuner/{store.key}: unreadable records" in capsys.readouterr().out


def test_a_kernel_record_with_a_parameter_of_the_wrong_shape_is_a_miss(tmp_path, tileauto_env):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8}, 0.5), trial(1, {"block": 16})]))
    meta = json.loads((store.entry_dir / KERNEL_JSON).read_text())
    meta["params"][0] = [1]
    _rewrite(store.entry_dir, KERNEL_JSON, meta)
    with pytest.raises(ValueError, match="kernel.json: malformed \\(AttributeError"):
        read_result(store.entry_dir, disk.read_manifest(store.entry_dir))
    with pytest.warns(RuntimeWarning, match="is unusable: unreadable records"):
        assert open_store().load() is None
