"""tileauto.cache.tuning: the tuning key, per-config measurements, loads that fail safely.

These tests need no compiler: the "kernel" of a stored result is a folder of fake files.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
from cache_fakes import DEVICE, TARGET, fake_result, open_store, ref_a, ref_b, trial

from tileauto.artifact import KernelArtifact
from tileauto.cache import disk
from tileauto.cache.entry import KIND_TUNED, read_result
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import NEVER_TRIED, Trial, TrialStatus
from tileauto.settings import Settings


# -- the key ------------------------------------------------------------------------------------
def test_same_problem_same_key_and_each_ingredient_changes_it():
    base = open_store()
    assert open_store().key == base.key
    assert open_store(args=(128,)).key != base.key
    assert open_store(kwargs={"dtype": "float16"}).key != base.key
    assert open_store(compile_args=CompileArgs(out_idx=[0])).key != base.key
    assert open_store(target='{"kind": "llvm", "mcpu": "other"}').key != base.key
    assert open_store(device={"kind": "cpu", "mcpu": "other"}).key != base.key
    assert open_store(profile=ProfileArgs(warmup=1, rep=5)).key != base.key
    assert open_store(profile=ProfileArgs(warmup=1, rep=3, ref_prog=ref_a)).key != base.key
    with pytest.MonkeyPatch.context() as cpus:
        cpus.setattr("tileauto.machine.available_cpus", lambda: 8)  # 7 threads allowed
        threads = Settings.from_env({**os.environ, "TILEAUTO_NUM_THREADS": "7"})
    assert open_store(threads).key != base.key  # CPU timing threads decide the winner
    # things that do not change the answer
    assert open_store(profile=ProfileArgs(warmup=1, rep=3, timeout=5.0)).key == base.key
    assert open_store(compile_args=CompileArgs(out_idx=[-1], verbose=True)).key == base.key


def test_reference_and_supply_programs_count_by_source_and_keep_the_cache_on():
    a = open_store(profile=ProfileArgs(warmup=1, rep=3, ref_prog=ref_a))
    assert a is not None
    assert open_store(profile=ProfileArgs(warmup=1, rep=3, ref_prog=ref_a)).key == a.key
    assert open_store(profile=ProfileArgs(warmup=1, rep=3, ref_prog=ref_b)).key != a.key
    s = open_store(profile=ProfileArgs(warmup=1, rep=3, supply_prog=lambda p: [torch.ones(64)]))
    assert s is not None and s.key != open_store().key


def test_captured_inputs_count_by_layout_not_values():
    a = open_store(captured=(torch.randn(64),))
    assert a is not None
    assert open_store(captured=(torch.randn(64),)).key == a.key
    assert open_store(captured=(torch.randn(65),)).key != a.key
    assert open_store(captured=(torch.randn(64).double(),)).key != a.key
    assert a.key != open_store().key


def test_space_is_part_of_the_key_but_not_of_the_problem():
    a = open_store(space=[{"block": 8}])
    b = open_store(space=[{"block": 8}, {"block": 32}])
    assert a.key != b.key and a.problem_key == b.problem_key


def test_a_list_is_keyed_by_its_filled_configs_in_order_as_the_session_views_it():
    from cache_fakes import factory

    from tileauto.space import tunable_parameters
    from tileauto.space.view import SpaceView

    listed = open_store(space=[{"block": 8}, {}])  # {} is the factory's default, block=16
    view = SpaceView([{"block": 8}, {"block": 16}], tunable_parameters(factory))
    assert open_store(space=view).key == listed.key
    assert (
        listed.full_ids
        == view.listed_configs()
        == {
            '{"block": 8}': {"block": 8},
            '{"block": 16}': {"block": 16},
        }
    )
    assert open_store(space=[{"block": 16}, {"block": 8}]).key != listed.key


@pytest.mark.parametrize(
    "env", [{"TILEAUTO_DISABLE_CACHE": "1"}, {"TILEAUTO_AUTO_TUNING_DISABLE_CACHE": "1"}]
)
def test_either_switch_turns_the_tuning_cache_off(env):
    assert open_store(Settings.from_env({**os.environ, **env})) is None


# -- save and load ------------------------------------------------------------------------------
def test_save_then_load_round_trip(tmp_path):
    store = open_store()
    trials = [trial(0, {"block": 8}, 1.0), trial(1, {"block": 16}, 2.0)]
    result = fake_result(tmp_path, trials)
    result.extra["problem"] = {"args": [64], "kwargs": {}}  # set by the session
    assert store.save(result) == store.key
    assert result.key is None  # the store does not modify the caller's result
    assert disk.verify(store.entry_dir) is None
    stored = open_store().load()
    assert stored.config == {"block": 8} and stored.latency_ms == 1.0
    assert stored.trials == tuple(trials) and stored.tuning_s == 1.5
    assert stored.problem == {"args": [64], "kwargs": {}}
    assert stored.artifact.directory == store.entry_dir / "kernel"
    assert stored.artifact.params == result.kernel.artifact.params
    manifest = disk.read_manifest(store.entry_dir)
    assert manifest["kind"] == KIND_TUNED and manifest["key"] == store.key
    assert manifest["target"] == TARGET and manifest["device"] == DEVICE
    assert {"tileauto", "tvm", "format"} <= set(manifest)
    assert read_result(store.entry_dir, manifest).config == {"block": 8}


def test_a_damaged_entry_is_a_miss_with_exactly_one_warning(tmp_path):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8}), trial(1, {"block": 16})]))
    lib = store.entry_dir / "kernel" / KernelArtifact.LIB_NAME
    lib.write_bytes(lib.read_bytes()[:5])
    fresh = open_store()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fresh.load() is None
        assert fresh.load() is None  # the retry under the lock does not warn again
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "kernel/kernel.so does not match its sha256" in messages[0]


def test_a_stale_version_is_a_miss(tmp_path):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8})]))
    data = disk.read_manifest(store.entry_dir)
    data["tvm"] = "0.1"
    (store.entry_dir / disk.MANIFEST).write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="stale: its tvm is '0.1'"):
        assert open_store().load() is None


def test_a_world_writable_entry_is_not_loaded(tmp_path):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8})]))
    (store.entry_dir / "trials.json").chmod(0o666)
    with pytest.warns(RuntimeWarning, match="refused.*writable by group or others"):
        assert open_store().load() is None


def test_a_failed_write_is_a_warning_not_an_error(tmp_path, monkeypatch):
    store = open_store()

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(disk, "publish", full)
    with pytest.warns(RuntimeWarning, match="could not write.*No space left"):
        assert store.save(fake_result(tmp_path, [trial(0, {"block": 8})])) is None
    assert not store.entry_dir.exists()


# -- per-config measurements --------------------------------------------------------------------
def test_measurements_are_reused_across_spaces_except_transient_failures(tmp_path):
    small = open_store(space=[{"block": 8}, {"block": 16}, {"block": 4}])
    trials = [
        trial(0, {"block": 8}, 1.0),
        trial(1, {"block": 16}, 2.0),
        trial(2, {"block": 4}, status=TrialStatus.TIMEOUT),
    ]
    small.save(fake_result(tmp_path, trials))
    bigger = open_store(space=[{"block": 8}, {"block": 16}, {"block": 4}, {"block": 32}])
    known = bigger.known_trials()
    assert sorted(json.loads(k)["block"] for k in known) == [8, 16]
    assert known['{"block": 8}'] == trials[0]


def test_corrupt_measurements_are_measured_again_with_one_warning(tmp_path):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8}), trial(1, {"block": 16})]))
    victim = sorted(store.measure_dir.glob("*.json"))[0]
    victim.write_text(victim.read_text()[:10])
    with pytest.warns(RuntimeWarning, match="1 measurement file"):
        known = open_store().known_trials()
    assert len(known) == 1


def test_unsafe_measurements_are_ignored(tmp_path):
    store = open_store()
    store.save(fake_result(tmp_path, [trial(0, {"block": 8})]))
    store.measure_dir.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="ignoring measurements"):
        assert open_store().known_trials() == {}


def test_save_writes_measured_trials_only_and_never_a_transient_over_a_measurement(tmp_path):
    space = [{"block": 8}, {"block": 16}, {"block": 4}]
    exhaustive = open_store(space=space)
    exhaustive.save(fake_result(tmp_path, [trial(i, c, 1.0 + i) for i, c in enumerate(space)]))
    # a budgeted tuning of the same problem (another key) that started before that one saved
    budgeted = open_store(space=space, profile=ProfileArgs(warmup=1, rep=3, max_trials=1))
    assert budgeted.key != exhaustive.key and budgeted.problem_key == exhaustive.problem_key
    never = Trial(0, {"block": 8}, TrialStatus.NOT_RUN, error=f"{NEVER_TRIED}: max_trials")
    timeout = trial(2, {"block": 4}, status=TrialStatus.TIMEOUT)
    budgeted.save(fake_result(tmp_path, [never, trial(1, {"block": 16}, 0.5), timeout], best=1))
    known = open_store(space=space).known_trials()
    latency = {json.loads(cid)["block"]: t.latency_ms for cid, t in known.items()}
    assert latency == {8: 1.0, 16: 0.5, 4: 3.0}  # the newer measurement of 16 replaced the old
    alone = open_store(space=space, args=(128,))  # a problem only the budgeted run measured
    alone.save(fake_result(tmp_path, [never, trial(1, {"block": 16}, 0.5), timeout], best=1))
    (only,) = alone.measure_dir.glob("*.json")  # no file for a config that was not measured
    assert json.loads(only.read_text())["trial"]["config"] == {"block": 16}


def test_a_pass_this_tuning_holds_is_forgotten_when_it_times_out_again(tmp_path):
    # re-timed, a config that had passed hung: the timeout is not written (measured again
    # anyway), so the pass it replaced must not be served to the next tuning either
    space = [{"block": 8}, {"block": 16}]
    store = open_store(space=space)
    assert store.known_trials() == {}
    assert store.save_trial(trial(0, {"block": 8}, 1.0)) and store.save_trial(
        trial(1, {"block": 16})
    )
    assert len(open_store(space=space).known_trials()) == 2
    assert not store.save_trial(trial(0, {"block": 8}, status=TrialStatus.TIMEOUT))
    known = open_store(space=space).known_trials()
    assert [json.loads(cid)["block"] for cid in known] == [16]
    # not run or cancelled says nothing of the kernel: a pass stays
    assert not store.save_trial(trial(1, {"block": 16}, status=TrialStatus.CANCELLED))
    assert len(open_store(space=space).known_trials()) == 1
