"""save_to_disk ships the files a result was loaded with, or none; load_from_disk says what a
folder is when it holds no result, and follows a link given as the folder.

Two real LLVM kernels of one shape, ``x + 1`` and ``x * 2``, tuned once for the module: a
folder of the first saved over by the second is the case a loaded result must not ship.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tvm import s_tir, te

import tileauto
from tileauto import AutotuneResult, CacheError
from tileauto.artifact import KernelArtifact
from tileauto.result import _staging

pytestmark = [pytest.mark.slow]

N = 1024


def kernel_of(op: str):
    """A plain factory: ``x + 1`` (``"add"``) or ``x * 2`` (``"mul"``), split by ``block``."""

    def kernel(block=64):
        A = te.placeholder((N,), "float32", name="A")
        f = (lambda i: A[i] + 1) if op == "add" else (lambda i: A[i] * 2)
        B = te.compute((N,), f, name="B")
        sch = s_tir.Schedule(te.create_prim_func([A, B]))
        (i,) = sch.get_loops(sch.get_sblock("B"))
        _, inner = sch.split(i, [None, block])
        sch.vectorize(inner)
        return sch.mod["main"]

    return kernel


def _tune(op: str) -> AutotuneResult:
    return (
        tileauto.AutoTuner.from_kernel(kernel_of(op), [{"block": 16}, {"block": 256}])
        .set_compile_args(out_idx=[-1], target="llvm")
        .set_profile_args(warmup=0, rep=2)
        .run(verbose=False)
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``{"add": folder, "mul": folder, "cache": the cache they were tuned in}``."""
    root = tmp_path_factory.mktemp("saved")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEAUTO_CACHE_DIR", str(root / "cache"))
        folders = {op: _tune(op).save_to_disk(root / op) for op in ("add", "mul")}
    return {**folders, "cache": root / "cache"}


def _copy(saved, op: str, path: Path) -> Path:
    shutil.copytree(saved[op], path)
    return path


def _computes(result: AutotuneResult, op: str) -> bool:
    x = torch.randn(N)
    return torch.allclose(result.kernel(x), x + 1 if op == "add" else x * 2)


def _nothing_at(path: Path) -> bool:
    """Nothing at ``path`` and no staging folder of it beside it."""
    return not path.exists() and not list(path.parent.glob(f".{path.name}.*"))


# -- a save copies the files the result was loaded with ---------------------------------------
def test_a_loaded_result_never_ships_the_library_another_save_put_in_its_folder(saved, tmp_path):
    folder = _copy(saved, "add", tmp_path / "F")
    plain = AutotuneResult.load_from_disk(folder)
    rebuilds = AutotuneResult.load_from_disk(folder, factory=kernel_of("add"))
    AutotuneResult.load_from_disk(saved["mul"]).save_to_disk(folder)  # F: another tuning now
    with pytest.raises(CacheError) as info:
        plain.save_to_disk(tmp_path / "G")
    message = str(info.value)
    assert f"the kernel's library {folder / 'kernel' / KernelArtifact.LIB_NAME} changed" in message
    assert f"since this result was read from the folder {folder}" in message
    assert "cannot compile it again; nothing was saved" in message and "factory=" in message
    assert _nothing_at(tmp_path / "G")
    assert _computes(plain, "add")  # the loaded library itself still serves
    # loaded with its factory, it compiles its own best config again and saves that
    again = AutotuneResult.load_from_disk(rebuilds.save_to_disk(tmp_path / "H"))
    assert again.config == rebuilds.config and _computes(again, "add")


def test_a_source_changed_since_the_load_is_named_and_nothing_is_saved(saved, tmp_path):
    folder = _copy(saved, "add", tmp_path / "F")
    loaded = AutotuneResult.load_from_disk(folder)
    script = folder / "kernel" / KernelArtifact.SCRIPT
    script.write_text(script.read_text() + "# edited\n")
    with pytest.raises(CacheError, match=f"the kernel's {KernelArtifact.SCRIPT} in .* changed"):
        loaded.save_to_disk(tmp_path / "G")
    assert _nothing_at(tmp_path / "G")


def test_a_cache_hit_whose_entry_changed_compiles_its_config_again(tmp_path):
    _tune("add")
    hit = _tune("add")
    assert hit.cache_hit
    source = hit.kernel.artifact.directory / KernelArtifact.KERNEL_SOURCE
    source.write_text("// not this kernel's source\n")  # as if another tuning replaced it
    folder = hit.save_to_disk(tmp_path / "G")
    assert "not this kernel's source" not in (folder / "kernel" / source.name).read_text()
    assert _computes(AutotuneResult.load_from_disk(folder), "add")
    assert hit.origin is not None and hit.origin.in_cache


# -- factory= lets a loaded result compile for a save --------------------------------------------
def test_a_result_loaded_with_its_factory_is_saved_after_its_folder_is_gone(saved, tmp_path):
    folder = _copy(saved, "add", tmp_path / "F")
    loaded = AutotuneResult.load_from_disk(folder, factory=kernel_of("add"))
    shutil.rmtree(folder)
    again = AutotuneResult.load_from_disk(loaded.save_to_disk(tmp_path / "H2"))
    assert again.config == loaded.config and _computes(again, "add")
    # without it, the message guesses why from where the result came from
    folder = _copy(saved, "add", tmp_path / "F2")
    plain = AutotuneResult.load_from_disk(folder)
    shutil.rmtree(folder)
    with pytest.raises(CacheError) as info:
        plain.save_to_disk(tmp_path / "H3")
    message = str(info.value)
    assert f"(the folder it was loaded from, {folder}, was removed or replaced?)" in message
    assert "cache entry" not in message
    assert _nothing_at(tmp_path / "H3")


# -- a save killed meanwhile leaves nothing for good ------------------------------------------------
CHILD = """
import sys
import tileauto.cache.entry as entry
from tileauto import AutotuneResult

fill = entry.fill_result

def held(*args, **kwargs):  # the save is under way: its staging folder exists
    fill(*args, **kwargs)
    print("filling", flush=True)
    sys.stdin.read()

entry.fill_result = held
AutotuneResult.load_from_disk(sys.argv[1]).save_to_disk(sys.argv[2])
"""


def test_the_staging_folder_of_a_killed_save_is_swept_by_the_next_save(saved, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(saved["add"]), str(out / "tuned")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "filling"
        child.send_signal(signal.SIGTERM)
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGTERM
    (left,) = [p.name for p in out.iterdir()]
    host = _staging._host()
    assert left.startswith(f".tuned.stage-{host}.{child.pid}-")
    # what is not a killed save's own is left alone: a live process's, another name's, a file,
    # another machine's (a shared folder: its pids are not this machine's)
    other = "000000" if host != "000000" else "ffffff"
    kept = [
        f".tuned.stage-{host}.1-0123abcd",
        f".other.stage-{host}.{child.pid}-0123abcd",
        "tuned.stage-x",
        f".tuned.stage-{other}.{child.pid}-0123abcd",
    ]
    for name in kept:
        (out / name).mkdir()
    (out / f".tuned.stage-{host}.{child.pid}-89abcdef").write_text("a file of mine\n")
    kept.append(f".tuned.stage-{host}.{child.pid}-89abcdef")
    AutotuneResult.load_from_disk(saved["add"]).save_to_disk(out / "tuned")
    assert sorted(p.name for p in out.iterdir()) == sorted([*kept, "tuned"])


# -- what load_from_disk takes for a folder ---------------------------------------------------------
def test_a_link_given_as_the_folder_is_followed(saved, tmp_path):
    (tmp_path / "link").symlink_to(saved["add"])
    loaded = AutotuneResult.load_from_disk(tmp_path / "link")
    assert _computes(loaded, "add")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(CacheError, match=f"a symbolic link to {tmp_path / 'nowhere'}, which"):
        AutotuneResult.load_from_disk(tmp_path / "dangling")
    inside = _copy(saved, "add", tmp_path / "F")
    os.replace(inside / "latency.json", tmp_path / "latency.json")
    (inside / "latency.json").symlink_to(tmp_path / "latency.json")
    with pytest.raises(CacheError, match="latency.json is a symbolic link"):  # a link inside
        AutotuneResult.load_from_disk(inside)


def test_a_folder_without_a_saved_result_is_named_as_such(saved, tmp_path):
    (tmp_path / "empty").mkdir()
    parent = tmp_path / "parent"
    _copy(saved, "add", parent / "a")
    cases = {
        tmp_path / "empty": "give the folder save_to_disk wrote",
        parent: "it holds saved results one level down (a/); give one of them",
        parent / "a" / "kernel": f"it is a saved result's kernel/ folder; give {parent / 'a'}",
        saved["cache"]: f"it is a tileauto cache; give one of its tuned entries, {saved['cache']}",
    }
    for path, hint in cases.items():
        with pytest.raises(CacheError) as info:
            AutotuneResult.load_from_disk(path)
        said = f"load_from_disk({str(path)!r}): {path} holds no saved result (no manifest.json): "
        assert str(info.value).startswith(said + hint), str(info.value)


def test_a_save_over_the_working_directory_leaves_the_process_in_the_new_folder(
    saved, tmp_path, monkeypatch
):
    # the swap replaced the folder the process worked in: os.getcwd() raised, and "." was a
    # removed folder, so save_to_disk(".") then load_from_disk(".") failed
    here = _copy(saved, "add", tmp_path / "here")
    monkeypatch.chdir(here)
    AutotuneResult.load_from_disk(saved["mul"]).save_to_disk(".")
    assert Path(os.getcwd()) == here.resolve()
    assert _computes(AutotuneResult.load_from_disk("."), "mul")
    AutotuneResult.load_from_disk(".").save_to_disk(".")  # the folder over itself
    AutotuneResult.load_from_disk(saved["add"]).save_to_disk(".")
    assert Path(os.getcwd()) == here.resolve()
    assert _computes(AutotuneResult.load_from_disk("."), "add")
