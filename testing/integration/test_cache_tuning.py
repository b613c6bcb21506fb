"""The tuning cache on real LLVM kernels, in this process: hits, misses, damage, bad disks."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from cache_kernels import (
    SCALE_ADD_CONFIGS,
    jit_matmul,
    ref_scale_add,
    shaped_scale_add,
    supply_scale_add,
    tune_scale_add,
    tuple_scale_add,
)

import tileauto
from tileauto.cache import disk, folders
from tileauto.cache.tuning import TuningStore
from tileauto.jit import compiler
from tileauto.records import TrialStatus
from tileauto.tune.session import TuningSession

pytestmark = pytest.mark.timeout(300)


def compiles() -> int:
    """Compiles run in this process so far (``compile_to_dir`` calls)."""
    return compiler.COMPILES.count


def forbid_tuning(monkeypatch) -> None:
    """Make any tuning run fail from now on: what follows must be answered by the cache."""

    def no_tuning(self):
        raise AssertionError("the session tuned: the cache should have answered")

    monkeypatch.setattr(TuningSession, "_tune", no_tuning)


def entries(cache: Path, kind: str = "autotuner") -> list[Path]:
    base = cache / kind
    return sorted(p for p in base.iterdir() if not p.name.startswith(".")) if base.is_dir() else []


def check(result) -> None:
    a = torch.rand(1024)
    torch.testing.assert_close(result.kernel(a), ref_scale_add(a))


def test_second_run_loads_without_compiling_or_tuning(tileauto_env, monkeypatch):
    first = tune_scale_add()
    assert not first.cache_hit and first.key is not None
    assert [p.name for p in entries(tileauto_env)] == [first.key]
    before = compiles()
    forbid_tuning(monkeypatch)
    second = tune_scale_add()
    assert second.cache_hit and second.key == first.key and second.config == first.config
    assert second.latency == first.latency and second.trials == first.trials
    assert compiles() == before
    assert second.kernel.artifact.directory == tileauto_env / "autotuner" / first.key / "kernel"
    check(second)


def test_cache_stays_on_with_ref_prog_and_supply_prog(monkeypatch):
    first = tune_scale_add(ref_prog=ref_scale_add, supply_prog=supply_scale_add)
    assert not first.cache_hit
    forbid_tuning(monkeypatch)
    assert tune_scale_add(ref_prog=ref_scale_add, supply_prog=supply_scale_add).cache_hit
    monkeypatch.undo()
    other = tune_scale_add(ref_prog=lambda a: a * 2.0 + 1, supply_prog=supply_scale_add)
    assert not other.cache_hit and other.key != first.key  # another reference: another key


def test_cache_stays_on_with_set_autotune_inputs(monkeypatch):
    with tileauto.set_autotune_inputs(torch.rand(1024)):
        first = tune_scale_add()
    assert not first.cache_hit
    forbid_tuning(monkeypatch)
    with tileauto.set_autotune_inputs(torch.rand(1024)):  # new values, same layout: a hit
        second = tune_scale_add()
    assert second.cache_hit and second.key == first.key
    check(second)


def test_adding_a_config_measures_only_that_config(tileauto_env):
    first = tune_scale_add(configs=SCALE_ADD_CONFIGS[:2])
    second = tune_scale_add(configs=SCALE_ADD_CONFIGS)
    assert not second.cache_hit and second.key != first.key

    # the old configs' trials are the stored records, not compiled or measured again; as the
    # best of the known trials they are re-timed with the one this run measured (the winner
    # and its latency come from samples of one run, docs/tuning.md Timing)
    def compiled(t):
        return t.compile_s

    assert [compiled(t) for t in second.trials[:2]] == [compiled(t) for t in first.trials]
    assert [t.config for t in second.trials[:2]] == [
        {"block": 8, "unroll": False},
        {"block": 16, "unroll": False},
    ]
    assert all(any("re-timed" in n for n in t.notes) for t in second.trials)
    assert compiled(second.default_trial) == compiled(first.default_trial)
    assert second.trials[2].config == {"block": 32, "unroll": True} and second.trials[2].ok
    assert compiled(second.trials[2]) not in [compiled(t) for t in first.trials]
    check(second)


def test_tuple_config_values_come_back_tuples_from_the_cache(tileauto_env, monkeypatch):
    # JSON makes a tuple a list: a cache hit, or a winner an earlier tuning measured, gave the
    # user {"tile": [32, True]} for a config given as {"tile": (32, True)}
    configs = [{"tile": (8, False)}, {"tile": (16, False)}, {"tile": (32, True)}]

    def tune(**profile):
        tuner = tileauto.AutoTuner.from_kernel(tuple_scale_add, configs)
        tuner.args = (1024,)
        tuner.set_compile_args(out_idx=[-1], target="llvm")
        tuner.set_profile_args(warmup=1, rep=3, ref_prog=ref_scale_add, **profile)
        return tuner.run(verbose=False)

    def tuples(result) -> bool:
        trials = [*result.trials, result.default_trial]
        return isinstance(result.config["tile"], tuple) and all(
            isinstance(t.config["tile"], tuple) for t in trials
        )

    first = tune()
    assert not first.cache_hit and tuples(first) and all(t.ok for t in first.trials)
    # another key of the same problem: every config's measurement is borrowed, the winner too
    borrowed = tune(max_trials=2)
    assert not borrowed.cache_hit and borrowed.key != first.key
    assert borrowed.config == first.config and tuples(borrowed)
    forbid_tuning(monkeypatch)
    again = tune()
    assert again.cache_hit and again.config == first.config and tuples(again)
    check(again)
    # a saved result keeps it too (best_config.json holds the literal beside the JSON)
    loaded = tileauto.AutotuneResult.load_from_disk(again.save_to_disk(tileauto_env / "saved"))
    assert loaded.config == first.config and isinstance(loaded.config["tile"], tuple)


def test_a_saved_result_compiles_again_with_the_calls_and_the_configs_tuples(tileauto_env):
    # load_from_disk(factory=...) on a machine where the library cannot run calls the factory
    # with the stored call and config: JSON made both tuples lists, and the factory failed
    from tileauto.cache.disk import read_manifest
    from tileauto.cache.entry import read_result
    from tileauto.result._portability import recompile

    tuner = tileauto.AutoTuner.from_kernel(shaped_scale_add, [{"tile": (8, False)}])
    tuner.args = ((1024,),)
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    saved = (
        tuner.set_profile_args(warmup=1, rep=3)
        .run(verbose=False)
        .save_to_disk(tileauto_env / "saved")
    )
    stored = read_result(saved, read_manifest(saved))
    assert stored.problem == {"args": [(1024,)], "kwargs": {}}
    assert stored.config == {"tile": (8, False)}
    kernel = recompile(stored, stored.artifact, None, shaped_scale_add)
    a = torch.rand(1024)
    torch.testing.assert_close(kernel(a), ref_scale_add(a))


def test_a_damaged_entry_is_one_warning_then_tuned_again_and_repaired(tileauto_env):
    first = tune_scale_add()
    lib = tileauto_env / "autotuner" / first.key / "kernel" / "kernel.so"
    lib.write_bytes(lib.read_bytes()[: lib.stat().st_size // 2])  # truncated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = tune_scale_add()
    cache_warnings = [w for w in caught if "tileauto cache" in str(w.message)]
    assert len(cache_warnings) == 1, [str(w.message) for w in caught]
    assert "kernel/kernel.so does not match its sha256" in str(cache_warnings[0].message)
    assert not second.cache_hit and second.key == first.key
    check(second)
    assert disk.verify(tileauto_env / "autotuner" / first.key) is None
    assert tune_scale_add().cache_hit


def test_an_unowned_or_world_writable_entry_is_refused(tileauto_env):
    first = tune_scale_add()
    entry = tileauto_env / "autotuner" / first.key
    (entry / "best_config.json").chmod(0o666)
    with pytest.warns(RuntimeWarning, match="refused: .*writable by group or others"):
        second = tune_scale_add()
    assert not second.cache_hit
    if os.getuid() == 0:
        os.chown(entry / "latency.json", 4242, 4242)
        with pytest.warns(RuntimeWarning, match="refused: .*owned by uid 4242"):
            assert not tune_scale_add().cache_hit


def test_auto_tuning_disable_cache_keeps_the_kernel_cache(tileauto_env, monkeypatch):
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_DISABLE_CACHE", "1")
    result = tune_scale_add()
    assert not result.cache_hit and result.key is None
    assert not tune_scale_add().cache_hit
    assert entries(tileauto_env) == [] and not (tileauto_env / "measurements").exists()
    jit_matmul(16, 16, 16, bm=4, bn=4)
    assert len(entries(tileauto_env, "kernels")) == 1


def test_disable_cache_turns_every_cache_off(tileauto_env, monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")
    assert not tune_scale_add().cache_hit
    before = compiles()
    jit_matmul.__class__(jit_matmul.factory, jit_matmul.compile_args)(16, 16, 16, bm=4, bn=4)
    jit_matmul.__class__(jit_matmul.factory, jit_matmul.compile_args)(16, 16, 16, bm=4, bn=4)
    assert before + 2 == compiles()
    assert entries(tileauto_env) == [] and entries(tileauto_env, "kernels") == []


def test_a_read_only_cache_still_returns_the_tuned_kernel(tileauto_env, monkeypatch):
    """Every write under the cache dir fails as on a read-only file system: one warning."""
    real = folders.make_private_dir

    def read_only(path):
        if Path(path).resolve().is_relative_to(tileauto_env.resolve()):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path)

    monkeypatch.setattr(folders, "make_private_dir", read_only)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tune_scale_add()
    messages = [str(w.message) for w in caught if "tileauto cache" in str(w.message)]
    assert len(messages) == 1 and "Read-only file system" in messages[0], messages
    assert "the tuned kernel is returned but not cached" in messages[0]
    check(result)
    assert entries(tileauto_env) == []


@pytest.mark.skipif(os.getuid() == 0, reason="root writes into read-only folders")
def test_a_really_read_only_cache_dir_still_returns_the_tuned_kernel(tmp_path, monkeypatch):
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o500)
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(cache))
    try:
        with pytest.warns(RuntimeWarning, match="not cached"):
            result = tune_scale_add()
        check(result)
    finally:
        cache.chmod(0o700)


def test_a_full_disk_still_returns_the_tuned_kernel(tileauto_env, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk, "publish", full)
    with pytest.warns(RuntimeWarning, match="No space left on device.*returned but not cached"):
        result = tune_scale_add()
    check(result)
    assert entries(tileauto_env) == []
    assert not list((tileauto_env / "tmp").glob("stage-*"))  # staging cleaned up


_READ_ONLY_CHILD = """
import errno, sys
from pathlib import Path
from tileauto.cache import folders
import torch
from cache_kernels import ref_scale_add, tune_scale_add

cache, real = Path(sys.argv[1]).resolve(), folders.make_private_dir

def read_only(path):
    if Path(path).resolve().is_relative_to(cache):
        raise OSError(errno.EROFS, "Read-only file system", str(path))
    return real(path)

folders.make_private_dir = read_only
for n in (1024, 2048):  # two tunings in one process
    a = torch.rand(n)
    torch.testing.assert_close(tune_scale_add(n).kernel(a), ref_scale_add(a))
"""


def test_a_read_only_cache_leaves_no_staging_folder_per_process(tmp_path):
    # a real process ends (its atexit runs): the temp folder holds no folder of its own
    temp, cache = tmp_path / "temp", tmp_path / "cache"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "TILEAUTO_CACHE_DIR": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    for _ in range(2):
        child = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", _READ_ONLY_CHILD, str(cache)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert child.returncode == 0, child.stderr[-3000:]
    assert sorted(p.name for p in temp.iterdir()) == [f"tileauto-{os.getuid()}"]
    # the user's locks stay (shared by their processes); no run's scratch folder does
    assert not [p for p in temp.rglob("*") if p.name.startswith(("tune-", "proc-"))]


_CHANGES_DIRECTORY_CHILD = """
import os, sys
import torch
from cache_kernels import ref_scale_add, tune_scale_add

os.chdir("a")
a = torch.rand(1024)
torch.testing.assert_close(tune_scale_add(1024).kernel(a), ref_scale_add(a))
os.chdir("../b")  # the program goes on elsewhere, then ends (tileauto's atexit runs)
"""


def test_a_relative_cache_dir_stays_where_the_run_started_when_the_program_moves(tmp_path):
    # was: the exit handler removed "cache/tmp/proc-..." from the new working directory, and
    # the run's own scratch folder stayed in the first one
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path), "TILEAUTO_CACHE_DIR": "cache"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    child = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _CHANGES_DIRECTORY_CHILD],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert list((tmp_path / "b").iterdir()) == []
    assert list((tmp_path / "a" / "cache" / "autotuner").iterdir())
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(("tune-", "proc-"))]


def measurement_records(cache: Path) -> dict[int, dict]:
    """The stored trial of each measured config of scale_add, by its block."""
    (problem,) = (cache / "measurements").iterdir()  # measurements/<problem>/<checks>/
    (folder,) = (p for p in problem.iterdir() if p.is_dir())
    records = [json.loads(p.read_text())["trial"] for p in folder.glob("*.json")]
    return {r["config"]["block"]: r for r in records}


def test_a_budgeted_tuning_that_saves_last_keeps_a_concurrent_tunings_measurements(
    tileauto_env, monkeypatch
):
    exhaustive = tune_scale_add()
    before = measurement_records(tileauto_env)
    assert sorted(before) == [8, 16, 32] and all(r["status"] == "ok" for r in before.values())
    # max_trials (another key, the same problem) started before the exhaustive run had saved:
    # it found no measurement, measured the default config only, and saves last
    monkeypatch.setattr(TuningStore, "known_trials", lambda self: {})
    budgeted = tune_scale_add(max_trials=1)
    monkeypatch.undo()
    assert budgeted.key != exhaustive.key and not budgeted.cache_hit
    never = [t for t in budgeted.trials if t.status is TrialStatus.NOT_RUN]
    assert [t.config["block"] for t in never] == [8, 32]
    after = measurement_records(tileauto_env)
    assert {b: r["status"] for b, r in after.items()} == {8: "ok", 16: "ok", 32: "ok"}
    assert after[8] == before[8] and after[32] == before[32]
    # a third tuning (another key again) measures nothing: every config is stored
    before_compiles = compiles()
    third = tune_scale_add(max_seconds=3600.0)
    assert not third.cache_hit and all(t.ok for t in third.trials)
    assert compiles() - before_compiles <= 1  # the winner, compiled in this process
