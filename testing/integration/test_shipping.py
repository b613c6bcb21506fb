"""save_to_disk publishes a complete folder or nothing; load_from_disk never kills its caller.

Real LLVM kernels (``tune_kernels.scale_jit``) tuned, saved and damaged on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cache_kernels import ref_scale_add, tuple_scale_add
from tune_kernels import scale_jit

import tileauto
from tileauto.artifact import KernelArtifact
from tileauto.cache import disk

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow]


def _tune_small():
    return (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"vec": 8}])
        .set_profile_args(warmup=0, rep=2)
        .run(verbose=False)
    )


def _reseal(path: Path) -> None:
    """Re-hash an edited folder (as if it had been written that way elsewhere)."""
    meta = {k: v for k, v in disk.read_manifest(path).items() if k != "files"}
    disk.seal(path, meta, shared=True)


def _check(result) -> None:
    a = torch.randn(256)
    torch.testing.assert_close(result.kernel(a), a * 2)


def _autotuned():
    """A new ``@autotune`` function over ``scale_jit``, as a user's module holds one."""
    return tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], warmup=0, rep=2, verbose=False)(
        scale_jit
    )


# -- save_to_disk: a complete folder or nothing ---------------------------------------------------
@pytest.mark.parametrize(
    "gone", [KernelArtifact.KERNEL_SOURCE, KernelArtifact.HOST_SOURCE, KernelArtifact.SCRIPT]
)
def test_save_recompiles_a_kernel_whose_sources_are_gone(tmp_path, gone):
    _tune_small()
    hit = _tune_small()
    assert hit.cache_hit
    (hit.kernel.artifact.directory / gone).unlink()  # a cached kernel missing one source
    saved = hit.save_to_disk(tmp_path / "saved")
    assert (saved / "kernel" / gone).is_file()
    back = tileauto.AutotuneResult.load_from_disk(saved)
    assert back.config == hit.config
    assert back.kernel.get_kernel_source() and back.kernel.get_host_source()
    assert back.kernel.get_script()
    _check(back)


def test_save_raises_and_publishes_nothing_when_a_source_cannot_be_had(tmp_path):
    first = _tune_small().save_to_disk(tmp_path / "first")
    loaded = tileauto.AutotuneResult.load_from_disk(first)
    (first / "kernel" / KernelArtifact.KERNEL_SOURCE).unlink()  # and a loaded result has no factory
    with pytest.raises(tileauto.CacheError) as info:
        loaded.save_to_disk(tmp_path / "second")
    message = str(info.value)
    assert "second" in message and KernelArtifact.KERNEL_SOURCE in message
    assert "cannot compile it again" in message
    assert not (tmp_path / "second").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".second")]


# -- a truncated library never kills the process that loads it -----------------------------------
# Each child loads a kernel, checks it, and prints its compile count and the warnings it saw.
CHILD_LOAD = """
import sys
import torch
import tileauto
kernel = tileauto.AutotuneResult.load_from_disk(sys.argv[1]).kernel
"""
CHILD_JIT = """
from tune_kernels import scale_jit
kernel = scale_jit(256)
"""
CHILD_CHECK = """
a = torch.randn(256)
torch.testing.assert_close(kernel(a), a * 2)
from tileauto.jit import compiler
print("COMPILES", compiler.COMPILES.count)
"""


def _run_child(code: str, cache_dir: Path, *args: str) -> tuple[int, list[str]]:
    """Run ``code`` in a fresh Python; its compile count and its warnings, one a line."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(HERE), env.get("PYTHONPATH", "")) if p
    )
    env["TILEAUTO_CACHE_DIR"] = str(cache_dir)
    script = f"import torch, warnings\nwarnings.simplefilter('always')\n{code}{CHILD_CHECK}"
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"the child died (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    (count,) = [
        int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("COMPILES")
    ]
    warned = [line for line in proc.stderr.splitlines() if "Warning" in line]
    return count, warned


def _truncate(lib: Path) -> int:
    """Cut a library to half its size (past the end of a segment the loader maps)."""
    data = lib.read_bytes()
    lib.write_bytes(data[: len(data) // 2])
    return len(data) // 2


def test_load_from_disk_recompiles_a_truncated_library_instead_of_dying(tmp_path):
    saved = _tune_small().save_to_disk(tmp_path / "saved")
    lib = saved / "kernel" / KernelArtifact.LIB_NAME
    cut = _truncate(lib)
    _reseal(saved)  # as if it had been shipped that way: the manifest matches
    count, warned = _run_child(CHILD_LOAD, tmp_path / "cache", str(saved))
    assert count == 1  # compiled again from the stored TVMScript
    (warning,) = [w for w in warned if "cannot run here" in w]
    assert f"{lib} is truncated or damaged" in warning and f"the file has {cut} bytes" in warning


def test_a_truncated_library_in_the_kernel_cache_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    assert _run_child(CHILD_JIT, cache) == (1, [])
    (entry,) = (cache / "kernels").iterdir()
    lib = entry / "kernel" / KernelArtifact.LIB_NAME
    _truncate(lib)
    meta = {k: v for k, v in disk.read_manifest(entry).items() if k != "files"}
    disk.seal(entry, meta)
    count, warned = _run_child(CHILD_JIT, cache)
    assert count == 1
    (warning,) = [w for w in warned if "does not load" in w]
    assert f"{lib} is truncated or damaged" in warning
    assert _run_child(CHILD_JIT, cache) == (0, [])  # the entry was replaced by a good one


def test_a_loaded_folder_without_its_sources_says_which_file_is_missing(tmp_path):
    saved = _tune_small().save_to_disk(tmp_path / "saved")
    (saved / "kernel" / KernelArtifact.KERNEL_SOURCE).unlink()  # as an older save wrote it
    _reseal(saved)
    back = tileauto.AutotuneResult.load_from_disk(saved)
    _check(back)  # the library itself still serves
    with pytest.raises(tileauto.TileautoError, match=KernelArtifact.KERNEL_SOURCE) as info:
        back.kernel.get_kernel_source()
    assert "factory=" in str(info.value)
    assert back.kernel.get_host_source()


# -- what a saved folder keeps of its tuning -------------------------------------------------------
def test_a_saved_autotune_result_names_its_factory_as_its_cache_entry_does(tmp_path, tileauto_env):
    tuned = _autotuned()
    tuned(256)
    result = tuned.get_tuner_result(256)
    entry = disk.read_manifest(tileauto_env / "autotuner" / result.key)
    manifest = disk.read_manifest(result.save_to_disk(tmp_path / "saved"))
    names = ("kernel", "module", "problem_key", "family")
    assert {n: manifest.get(n) for n in names} == {n: entry[n] for n in names}
    assert manifest["kernel"] == "scale" and manifest["module"] == "tune_kernels"  # not "main"


def test_load_from_disk_compiles_with_the_factory_under_an_autotune_function(tmp_path, monkeypatch):
    tuned = _autotuned()
    tuned(256)
    saved = tuned.get_tuner_result(256).save_to_disk(tmp_path / "saved")
    elsewhere = _autotuned()  # the same decorated function, in another process
    monkeypatch.setattr(
        "tileauto.result.shipping.cannot_run_here", lambda artifact, args: "another CPU"
    )
    with pytest.warns(RuntimeWarning, match="cannot run here"):
        loaded = tileauto.AutotuneResult.load_from_disk(saved, factory=elsewhere)
    assert elsewhere.results == {}  # its @jit factory compiled the best config: no tuning
    assert loaded.kernel.config["vec"] == loaded.config["vec"]
    _check(loaded)


class _Size:
    """A problem argument that is no JSON value: the tuning's call is not recorded."""

    def __init__(self, n):
        self.n = n

    def __repr__(self):
        return f"_Size({self.n})"


def scale_of(size, vec=8):
    from tune_kernels import scale

    return scale(size.n, vec=vec)


def test_load_from_disk_with_a_factory_whose_call_was_not_recorded_uses_the_script(
    tmp_path, monkeypatch
):
    jitted = tileauto.jit(out_idx=[-1], target="llvm")(scale_of)
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], warmup=0, rep=2, verbose=False)(
        jitted
    )
    tuned(_Size(256))
    saved = tuned.get_tuner_result(_Size(256)).save_to_disk(tmp_path / "saved")
    monkeypatch.setattr(
        "tileauto.result.shipping.cannot_run_here", lambda artifact, args: "another CPU"
    )
    with pytest.warns(RuntimeWarning, match="does not record the arguments") as caught:
        loaded = tileauto.AutotuneResult.load_from_disk(saved, factory=jitted)
    assert any("recompiled from its TVMScript" in str(w.message) for w in caught)
    a = torch.randn(256)
    torch.testing.assert_close(loaded.kernel(a), a * 2)


def test_a_loaded_results_trials_get_the_winners_tuples_back(tmp_path):
    configs = [{"tile": (16, False)}, {"tile": (32, True)}]
    tuner = tileauto.AutoTuner.from_kernel(tuple_scale_add, configs)
    tuner.args = (1024,)
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    result = tuner.set_profile_args(warmup=0, rep=2, ref_prog=ref_scale_add).run(verbose=False)
    saved = result.save_to_disk(tmp_path / "saved")
    loaded = tileauto.AutotuneResult.load_from_disk(saved)
    assert [t.config for t in loaded.trials] == configs
    assert all(isinstance(t.config["tile"], tuple) for t in loaded.trials)
    assert isinstance(loaded.default_trial.config["tile"], tuple)
    assert loaded.best_trial is not None and loaded.best_trial.config == loaded.config
    # a folder without the winner's literal (an older save) reads as JSON wrote it, alike
    best = saved / "best_config.json"
    best.write_text(json.dumps({"config": json.loads(best.read_text())["config"]}))
    _reseal(saved)
    older = tileauto.AutotuneResult.load_from_disk(saved)
    assert isinstance(older.config["tile"], list)
    assert all(isinstance(t.config["tile"], list) for t in older.trials)
    assert older.best_trial is not None
