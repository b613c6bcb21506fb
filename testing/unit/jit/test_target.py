"""Tests of tileauto.jit.target's portability check: whether a stored library runs on this CPU.

This CPU's features are faked (``host_cpu_features``, ``cpu_features_here``), so the answers
are the same on every machine: a CPU model's features come from LLVM's tables, which need no
such CPU.
"""

from __future__ import annotations

import json

import pytest
from tvm.target import Target, codegen

from tileauto.jit import target as compiler_target

TRIPLE = "x86_64-unknown-linux-gnu"
SPR = {"kind": "llvm", "mcpu": "sapphirerapids", "mtriple": TRIPLE}
HASWELL = {"kind": "llvm", "mcpu": "haswell", "mtriple": TRIPLE}


def _features(spec: dict) -> set[str]:
    return set(codegen.llvm_get_cpu_features(Target(spec)))


@pytest.fixture
def x86_here(monkeypatch):
    """An x86-64 machine (whatever runs the test): a triple is compared by its architecture."""
    monkeypatch.setattr(codegen, "llvm_get_system_triple", lambda: TRIPLE)


def _cuda(arch: str, host: dict) -> str:
    return json.dumps({"kind": "cuda", "arch": arch, "host": host})


def test_the_host_code_of_a_cuda_kernel_is_checked_as_a_cpu_kernel(monkeypatch, x86_here):
    """Only the GPU's arch was compared: host code built for an AVX-512 CPU was judged to
    run on a CPU without AVX-512."""
    monkeypatch.setattr(compiler_target, "cuda_usable", lambda: True)
    monkeypatch.setattr(compiler_target, "cpu_features_here", lambda: _features(HASWELL))
    here = str(compiler_target.resolve_target("cuda").attrs["arch"])
    reason = compiler_target.cannot_run_here(_cuda(here, SPR), "cuda", None)
    assert reason is not None
    assert reason.startswith("its host code: it uses CPU instructions this CPU lacks (")
    assert "avx512" in reason
    assert compiler_target.cannot_run_here(_cuda(here, HASWELL), "cuda", None) is None
    arm = {"kind": "llvm", "mtriple": "aarch64-unknown-linux-gnu"}
    assert compiler_target.cannot_run_here(_cuda(here, arm), "cuda", None) == (
        "its host code: built for aarch64, this CPU is x86_64"
    )
    other = "sm_52" if here != "sm_52" else "sm_61"  # the GPU is still asked first
    assert compiler_target.cannot_run_here(_cuda(other, HASWELL), "cuda", None) == (
        f"built for {other}, this GPU is {here}"
    )


def _masking_vm(monkeypatch) -> set[str]:
    """A VM whose CPU is named a Sapphire Rapids but reports AVX-512 and AMX off."""
    masked = {f for f in _features(SPR) if f.startswith(("avx512", "amx"))}
    real = {**dict.fromkeys(_features(SPR), True), **dict.fromkeys(masked, False)}
    monkeypatch.setattr(compiler_target, "host_cpu_features", lambda: real)
    monkeypatch.setattr(Target, "from_device", staticmethod(lambda *a, **k: Target(SPR)))
    monkeypatch.setattr(
        compiler_target, "host_cpu_target", compiler_target.host_cpu_target.__wrapped__
    )
    return masked


def test_a_cpu_is_judged_by_the_features_it_reports_not_by_its_models_name(monkeypatch, x86_here):
    """The features "here" were those of this CPU's model name: a VM that masks AVX-512 but
    keeps the name passed the check for an AVX-512 library, which then dies of SIGILL."""
    masked = _masking_vm(monkeypatch)
    assert "avx512f" in masked
    reason = compiler_target.cannot_run_here(json.dumps(SPR), "cpu", None)
    assert reason is not None and reason.startswith("it uses CPU instructions this CPU lacks (")
    assert any(name in reason for name in masked)
    assert compiler_target.cannot_run_here(json.dumps(HASWELL), "cpu", None) is None


def test_this_cpus_target_turns_off_what_the_cpu_masks(monkeypatch, x86_here):
    """So a kernel built here needs none of it, and its target (part of the cache key) is not
    that of an unmasked CPU of the same name."""
    masked = _masking_vm(monkeypatch)
    host = compiler_target.host_cpu_target()
    assert str(host.attrs["mcpu"]) == "sapphirerapids"
    assert sorted(str(a) for a in host.attrs["mattr"]) == sorted(f"-{f}" for f in masked)
    assert not _features(json.loads(str(host))) & masked
    stored = compiler_target.target_json(host)
    assert compiler_target.cannot_run_here(stored, "cpu", None) is None


def test_this_cpus_target_is_tvms_when_nothing_is_masked(monkeypatch):
    real = dict.fromkeys(_features(SPR), True)
    monkeypatch.setattr(compiler_target, "host_cpu_features", lambda: {**real, "avx512fp16": True})
    monkeypatch.setattr(Target, "from_device", staticmethod(lambda *a, **k: Target(SPR)))
    host = compiler_target.host_cpu_target.__wrapped__()
    assert json.loads(str(host)) == json.loads(str(Target(SPR)))  # no mattr: the same key


def test_features_llvm_cannot_read_here_are_the_models(monkeypatch):
    """(LLVM reads only some features on some systems: an absent one is not 'off'.)"""
    monkeypatch.setattr(compiler_target, "host_cpu_features", lambda: {"avx2": False, "xop": True})
    monkeypatch.setattr(compiler_target, "host_cpu_target", lambda: Target(HASWELL))
    here = compiler_target.cpu_features_here()
    assert here == (_features(HASWELL) - {"avx2"}) | {"xop"}


def test_this_machines_features_are_read():
    real = compiler_target.host_cpu_features()
    if not real:
        pytest.skip("this TVM does not offer LLVM's reading of the host CPU")
    assert all(isinstance(k, str) and isinstance(v, bool) for k, v in real.items())
    on = {f for f, v in real.items() if v}
    assert on <= compiler_target.cpu_features_here()
