"""Fakes for the cache tests: a result whose "kernel" is a folder of fake files (no compiler)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tileauto.artifact import KernelArtifact, ParamSpec
from tileauto.cache.tuning import TuningStore
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.result.record import AutotuneResult
from tileauto.settings import Settings

TARGET = '{"kind": "llvm", "mcpu": "test"}'
DEVICE = {"kind": "cpu", "mcpu": "test"}
SPACE = [{"block": 8}, {"block": 16}]


def factory(n, block=16, dtype="float32"):
    return n * block


def ref_a(a):
    return a * 2


def ref_b(a):
    return a * 3


def open_store(settings=None, space=SPACE, args=(64,), profile=None, captured=None, **kw):
    return TuningStore.open(
        settings or Settings.from_env(),
        kw.pop("factory", factory),
        args,
        kw.pop("kwargs", {}),
        space,
        kw.pop("compile_args", CompileArgs(out_idx=[-1])),
        profile or ProfileArgs(warmup=1, rep=3),
        captured,
        None,
        target=kw.pop("target", TARGET),
        device=kw.pop("device", DEVICE),
    )


def trial(index, config, ms=1.0, status=TrialStatus.OK):
    latency = LatencyStats(ms, ms, ms, ms, ms, 3) if status.ok else None
    return Trial(index, config, status, latency, compile_s=0.1, run_s=0.2)


def fake_kernel(tmp_path: Path) -> SimpleNamespace:
    d = tmp_path / "artifact"
    d.mkdir(exist_ok=True)
    (d / KernelArtifact.LIB_NAME).write_bytes(b"\x7fELF fake library")
    (d / KernelArtifact.KERNEL_SOURCE).write_text("device code")
    (d / KernelArtifact.HOST_SOURCE).write_text("host code")
    (d / KernelArtifact.SCRIPT).write_text("# script")
    artifact = KernelArtifact(
        d,
        "main",
        (ParamSpec("A", (64,), "float32"), ParamSpec("B", (64,), "float32")),
        (1,),
        TARGET,
        "cpu",
    )
    return SimpleNamespace(artifact=artifact)


def fake_result(tmp_path, trials, best=0) -> AutotuneResult:
    return AutotuneResult(
        config=dict(trials[best].config),
        latency=trials[best].latency_ms,
        ref_latency=None,
        kernel=fake_kernel(tmp_path),
        trials=tuple(trials),
        default_trial=trials[-1],
        tuning_s=1.5,
    )
