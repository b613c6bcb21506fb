"""Tests of tileauto.jit.target_memo and tileauto.jit.runtime: answers without the compiler.

The test process has TVM imported, so "a process without the compiler" is simulated by
``compiler_loaded`` returning False and the compiler's functions raising when called; the
real thing (fresh processes, ``sys.modules``) is tested in
``testing/integration/test_warm_imports.py``.
"""

from __future__ import annotations

import json
import os
import stat

import kernels
import pytest
import torch
from tvm.target import Target

import tileauto
from tileauto.artifact import KernelArtifact
from tileauto.jit import runtime, target_memo
from tileauto.jit import target as compiler_target
from tileauto.options import CompileArgs
from tileauto.settings import Settings


@pytest.fixture
def settings(tileauto_env) -> Settings:
    return Settings.from_env()


def forbid_compiler(monkeypatch) -> None:
    """As in a process that has not imported TVM: the compiler must not be asked."""

    def refuse(*args, **kwargs):
        raise AssertionError("the compiler was asked on a memo hit")

    monkeypatch.setattr(target_memo, "compiler_loaded", lambda: False)
    for name in ("resolve_target", "device_fingerprint", "cannot_run_here", "host_cpu_target"):
        monkeypatch.setattr(compiler_target, name, refuse)


def memo_files(settings: Settings) -> list:
    folder = settings.cache_dir / target_memo.MEMO_DIR
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def test_host_identity_is_a_stable_hash():
    ident = target_memo.host_identity()
    if ident is None:
        pytest.skip("no /proc/cpuinfo here")
    assert len(ident) == 32 and ident == target_memo.host_identity()


@pytest.mark.parametrize("target", ["llvm", "auto", {"kind": "llvm", "mcpu": "generic"}])
def test_resolve_answers_as_the_compiler_then_from_the_memo(settings, monkeypatch, target):
    if target_memo.host_identity() is None:
        pytest.skip("no /proc/cpuinfo here")
    resolved = compiler_target.resolve_target(target)
    first = target_memo.resolve(target, None, settings)
    assert first.json == compiler_target.target_json(resolved)
    assert first.device_type == compiler_target.device_type_of(resolved)
    assert first.device == compiler_target.device_fingerprint(first.device_type)
    assert memo_files(settings)
    forbid_compiler(monkeypatch)
    assert target_memo.resolve(target, None, settings) == first


def test_memo_files_are_private_and_written_whole(settings):
    target_memo.resolve("llvm", None, settings)
    folder = settings.cache_dir / target_memo.MEMO_DIR
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in memo_files(settings):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert set(json.loads(path.read_text())) == {"payload", "value"}
    assert not list(folder.glob(".*.tmp"))


def test_a_tampered_or_shared_memo_is_not_believed(settings, monkeypatch):
    target_memo.resolve("llvm", None, settings)
    files = memo_files(settings)
    for path in files:
        data = json.loads(path.read_text())
        data["payload"]["tvm"] = "another"  # a file that does not answer this question
        path.write_text(json.dumps(data))
    asked = []
    monkeypatch.setattr(target_memo, "compiler_loaded", lambda: False)
    real = compiler_target.resolve_target
    monkeypatch.setattr(compiler_target, "resolve_target", lambda *a: asked.append(a) or real(*a))
    target_memo.resolve("llvm", None, settings)
    assert asked, "a memo whose payload differs was believed"
    asked.clear()
    target_memo.resolve("llvm", None, settings)  # rewritten: now it answers
    assert not asked
    for path in memo_files(settings):
        path.chmod(0o666)  # writable by others: someone else could have planted it
    target_memo.resolve("llvm", None, settings)
    assert asked


def test_targets_for_the_cpu_do_not_ask_torch_about_gpus(settings, monkeypatch):
    monkeypatch.setattr(
        target_memo, "_gpu_identity", lambda: pytest.fail("GPU queried for a CPU target")
    )
    target_memo.resolve("llvm", None, settings)
    target_memo.resolve({"kind": "llvm"}, None, settings)
    monkeypatch.setenv("TILEAUTO_DEFAULT_TARGET", "llvm")
    target_memo.resolve("auto", None, Settings.from_env())


def test_auto_and_cuda_depend_on_the_gpu(settings, monkeypatch):
    seen = []
    monkeypatch.setattr(target_memo, "_gpu_identity", lambda: seen.append(1) or {"cuda": False})
    target_memo.resolve("auto", None, settings)
    assert seen


def test_objects_and_disabled_caches_are_not_memoized(settings, monkeypatch):
    resolved = target_memo.resolve(Target("llvm"), None, settings)
    assert resolved.device_type == "cpu" and memo_files(settings) == []
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")
    off = Settings.from_env()
    target_memo.resolve("llvm", None, off)
    assert not (off.cache_dir / target_memo.MEMO_DIR).exists()


def test_a_bad_target_still_fails_with_the_compilers_message(settings):
    with pytest.raises(ValueError, match="target="):
        target_memo.resolve("not-a-target-kind", None, settings)
    assert memo_files(settings) == []


def test_a_host_target_runs_here_without_asking_the_compiler(settings, monkeypatch):
    resolved = target_memo.resolve("llvm", None, settings)  # fills the memo, as tuning does
    if target_memo.host_identity() is None:
        pytest.skip("no /proc/cpuinfo here")
    forbid_compiler(monkeypatch)
    assert target_memo.resolve("llvm", None, settings) == resolved
    assert target_memo.cannot_run_here(host_artifact(settings, resolved), None, settings) is None
    assert target_memo.device_fingerprint("cpu", settings) == resolved.device


def host_artifact(settings: Settings, resolved) -> KernelArtifact:
    return KernelArtifact(
        directory=settings.cache_dir,
        func_name="main",
        params=(),
        out_idx=(),
        target=resolved.json,
        device_type="cpu",
    )


def test_explicit_compile_args_are_part_of_the_question(settings):
    artifact = host_artifact(settings, target_memo.resolve("llvm", None, settings))
    assert target_memo.cannot_run_here(artifact, CompileArgs(target="llvm"), settings) is None
    reason = target_memo.cannot_run_here(artifact, CompileArgs(target="c"), settings)
    assert reason is not None and "asks for a c target" in reason


# -- the runtime ------------------------------------------------------------------------------
def test_runtime_loads_and_runs_a_parallel_kernel(tmp_path):
    kernel = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(64)
    module = runtime.load_module(kernel.artifact.lib_path, "cpu")
    a, b, c = torch.rand(64), torch.rand(64), torch.empty(64)
    module[kernel.func_name](a, b, c)
    torch.testing.assert_close(c, a + b)
    assert runtime.num_threads() >= 1 and runtime.enabled("llvm")


def test_runtime_refuses_a_missing_library(tmp_path):
    with pytest.raises(ValueError, match="cannot find file"):
        runtime.load_module(tmp_path / "nope.so")


def test_runtime_finds_tvms_libraries_where_tvm_does(monkeypatch, tmp_path):
    dirs = runtime._lib_dirs()
    assert any((d / "libtvm_runtime.so").is_file() for d in dirs)
    monkeypatch.setenv("TVM_LIBRARY_PATH", str(tmp_path))
    assert runtime._lib_dirs()[0] == tmp_path
    assert os.environ["TVM_LIBRARY_PATH"] == str(tmp_path)


def test_runtime_falls_back_to_tvm_when_its_library_does_not_load(monkeypatch):
    kernel = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(64)

    def broken() -> None:
        raise OSError("libtvm_runtime.so: cannot open shared object file")

    monkeypatch.setattr(runtime, "compiler_loaded", lambda: False)
    monkeypatch.setattr(runtime, "ensure_runtime", broken)
    module = runtime.load_module(kernel.artifact.lib_path, "cpu")
    a, b, c = torch.rand(64), torch.rand(64), torch.empty(64)
    module[kernel.func_name](a, b, c)
    torch.testing.assert_close(c, a + b)
