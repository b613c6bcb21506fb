"""The cache across processes: warm starts, concurrent tuners, shipped results.

Each child is a fresh Python (``cache_kernels.child_main``) that reports whether it hit the
cache, how many compiles it ran (``tileauto.jit.compiles()``) and whether it
started any worker process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from cache_kernels import ref_scale_add

import tileauto
from tileauto.cache import disk
from tileauto.errors import CacheError
from tileauto.jit import compiler

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CHILD = "import cache_kernels; cache_kernels.child_main()"

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def compiles() -> int:
    """Compiles run in this process so far (``compile_to_dir`` calls)."""
    return compiler.COMPILES.count


def child_env(cache_dir: Path) -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(HERE), env.get("PYTHONPATH", "")) if p
    )
    env["TILEAUTO_CACHE_DIR"] = str(cache_dir)
    return env


def parse(proc_stdout: str, stderr: str) -> dict:
    lines = [line for line in proc_stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the child printed no result:\n{proc_stdout[-2000:]}\n{stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def run_child(cache_dir: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        env=child_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return parse(proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """One cold run in a child: tunes, compiles the @jit matmul, saves the result."""
    base = tmp_path_factory.mktemp("processes")
    cache, saved = base / "cache", base / "saved"
    out = run_child(cache, "tune", str(saved))
    return cache, saved, out


def test_cold_run_tunes_and_compiles(cold):
    _, saved, out = cold
    assert out["ok"] and out["matmul_ok"]
    assert not out["cache_hit"] and out["key"]
    assert out["compiles"] >= 1  # at least the @jit matmul (tuning compiles in workers)
    assert disk.verify(saved) is None


def test_warm_start_in_a_new_process_compiles_nothing_and_starts_no_worker(cold):
    cache, _, first = cold
    out = run_child(cache, "tune")
    assert out["cache_hit"] and out["key"] == first["key"] and out["config"] == first["config"]
    assert out["ok"] and out["matmul_ok"]
    assert out["compiles"] == 0, "a warm start compiled something"
    assert out["workers"] == 0, "a warm start started worker processes"


def test_saved_result_loads_in_a_fresh_process_with_an_empty_cache(cold, tmp_path):
    _, saved, first = cold
    empty = tmp_path / "other-cache"
    out = run_child(empty, "load", str(saved))
    assert out["ok"] and out["cache_hit"] and out["config"] == first["config"]
    assert out["compiles"] == 0 and out["workers"] == 0
    assert not (empty / "autotuner").exists()


def test_concurrent_tuners_of_one_key_tune_it_once(tmp_path):
    cache, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, "race", str(barrier), "2"],
            env=child_env(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=400)
        assert p.returncode == 0, stderr[-4000:]
        outs.append(parse(stdout, stderr))
    assert sorted(o["cache_hit"] for o in outs) == [False, True], outs
    assert all(o["ok"] and o["matmul_ok"] for o in outs)
    assert outs[0]["key"] == outs[1]["key"] and outs[0]["config"] == outs[1]["config"]
    logs = list((cache / "logs").glob("autotune-scale_add-*.jsonl"))
    assert len(logs) == 1, "the key was tuned more than once"
    waiter = next(o for o in outs if o["cache_hit"])
    assert waiter["workers"] == 0  # it waited, then loaded


# -- load_from_disk in this process -------------------------------------------------------------
def copy_saved(cold, tmp_path) -> Path:
    dest = tmp_path / "saved"
    shutil.copytree(cold[1], dest)
    return dest


def reseal(path: Path) -> None:
    """Re-hash an edited folder (as if it had been written that way on another machine)."""
    meta = {k: v for k, v in disk.read_manifest(path).items() if k != "files"}
    disk.seal(path, meta, shared=True)


def check(result) -> None:
    a = torch.rand(1024)
    torch.testing.assert_close(result.kernel(a), ref_scale_add(a))


def test_load_from_disk_in_process_does_not_compile(cold, tmp_path):
    before = compiles()
    result = tileauto.AutotuneResult.load_from_disk(copy_saved(cold, tmp_path))
    assert compiles() == before and result.cache_hit
    check(result)
    assert result.kernel.get_kernel_source()


def test_library_built_for_another_cpu_is_recompiled_with_a_warning(cold, tmp_path):
    saved = copy_saved(cold, tmp_path)
    meta_path = saved / "kernel" / "kernel.json"
    meta = json.loads(meta_path.read_text())
    target = json.loads(meta["target"])
    target["mcpu"] = "sapphirerapids"  # AMX and AVX512-FP16: not on the test machine
    meta["target"] = json.dumps(target)
    meta_path.write_text(json.dumps(meta))
    reseal(saved)
    from tileauto.result._portability import cannot_run_here as _cannot_run_here

    if _cannot_run_here(_artifact(saved), None) is None:
        pytest.skip("this CPU has every sapphirerapids instruction")
    before = compiles()
    with pytest.warns(RuntimeWarning, match="cannot run here .*CPU instructions this CPU lacks"):
        result = tileauto.AutotuneResult.load_from_disk(saved)
    assert compiles() == before + 1
    assert result.config == cold[2]["config"]
    check(result)


def _artifact(path: Path):
    from tileauto.cache.entry import read_artifact

    return read_artifact(path)


def test_library_that_does_not_load_is_recompiled_with_a_warning(cold, tmp_path):
    saved = copy_saved(cold, tmp_path)
    (saved / "kernel" / "kernel.so").write_bytes(b"not a shared library")
    reseal(saved)
    before = compiles()
    with pytest.warns(RuntimeWarning, match="cannot run here \\(the library does not load"):
        result = tileauto.AutotuneResult.load_from_disk(saved)
    assert compiles() == before + 1
    check(result)


def test_load_from_disk_refuses_damaged_or_unsafe_folders(cold, tmp_path):
    saved = copy_saved(cold, tmp_path)
    (saved / "trials.json").write_text("{")
    with pytest.raises(CacheError, match="trials.json does not match its sha256"):
        tileauto.AutotuneResult.load_from_disk(saved)
    with pytest.raises(CacheError, match="nowhere'\\): no such folder"):
        tileauto.AutotuneResult.load_from_disk(tmp_path / "nowhere")
    other = tmp_path / "other"
    shutil.copytree(cold[1], other)
    (other / "kernel").chmod(0o777)
    with pytest.raises(CacheError, match="writable by group or others"):
        tileauto.AutotuneResult.load_from_disk(other)


def test_load_from_disk_applies_out_idx_from_compile_args(cold, tmp_path):
    result = tileauto.AutotuneResult.load_from_disk(
        copy_saved(cold, tmp_path), {"out_idx": None, "target": "auto"}
    )
    a = torch.rand(1024)
    torch.testing.assert_close(result.kernel(a), ref_scale_add(a))
    inplace = tileauto.AutotuneResult.load_from_disk(
        copy_saved(cold, tmp_path / "b"), {"out_idx": []}
    )
    b = torch.empty(1024)
    assert inplace.kernel(a, b) is None
    torch.testing.assert_close(b, ref_scale_add(a))


def test_save_to_disk_replaces_a_result_but_never_a_foreign_folder(cold, tmp_path):
    result = tileauto.AutotuneResult.load_from_disk(copy_saved(cold, tmp_path))
    again = result.save_to_disk(tmp_path / "saved")  # over the folder it was loaded from
    assert disk.verify(again) is None
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("precious")
    with pytest.raises(CacheError, match="not a saved tileauto result"):
        result.save_to_disk(foreign)
    assert (foreign / "notes.txt").read_text() == "precious"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(tileauto.AutotuneResult.load_from_disk(again))
