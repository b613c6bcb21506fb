"""One tuned result as a folder: JSON records, the kernel's library and sources, a manifest.

    best_config.json   {"config": {...}}
    latency.json       best / default / reference latency (ms) and the best's statistics
    trials.json        every config's trial (status, latency statistics, compile s, error)
    kernel/            kernel.so, kernel.json (parameters, target), kernel and host sources
    manifest.json      format, versions, target, device fingerprint, sha256 of every file

Loading needs no pickle: the shared library plus JSON suffice.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tileauto.artifact import KernelArtifact
from tileauto.cache import disk
from tileauto.errors import CacheError
from tileauto.records import Trial


def write_result(result: Any, path: Path, extra_manifest: dict[str, Any] | None = None) -> Path:
    """Write ``result`` to the folder ``path`` atomically (staged next to it, then renamed)."""
    from tileauto.cache.key import versions

    path = Path(path)
    disk.make_private_dir(path.parent)
    staged = disk.stage_dir(path.parent / ".tmp")
    try:
        fill_dir(result, staged)
        kernel_meta = json.loads((staged / "kernel" / KernelArtifact.META).read_text())
        disk.write_manifest(
            staged, {**versions(), "target": kernel_meta["target"], **(extra_manifest or {})}
        )
        disk.publish(staged, path)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return path


def fill_dir(result: Any, out: Path) -> None:
    """Write the JSON records and copy the kernel artifact into ``out``."""
    (out / "best_config.json").write_text(
        json.dumps({"config": result.config}, indent=1, sort_keys=True, default=repr)
    )
    best = result.best_trial
    latency = {
        "latency_ms": result.latency,
        "ref_latency_ms": result.ref_latency,
        "default_latency_ms": result.default_latency,
        "best": best.latency.to_json() if best is not None and best.latency is not None else None,
    }
    (out / "latency.json").write_text(json.dumps(latency, indent=1))
    problem = result.extra.get("problem")
    if problem is not None:
        (out / "problem.json").write_text(json.dumps(problem, indent=1, sort_keys=True))
    trials = {
        "trials": [t.to_json() for t in result.trials],
        "default": result.default_trial.to_json() if result.default_trial else None,
        "tuning_s": result.tuning_s,
    }
    (out / "trials.json").write_text(json.dumps(trials, indent=1, default=repr))
    artifact: KernelArtifact = result.kernel.artifact
    kernel_dir = out / "kernel"
    kernel_dir.mkdir()
    for name in (
        KernelArtifact.LIB_NAME,
        KernelArtifact.KERNEL_SOURCE,
        KernelArtifact.HOST_SOURCE,
        KernelArtifact.SCRIPT,
    ):
        src = artifact.directory / name
        if src.is_file():
            shutil.copyfile(src, kernel_dir / name)
    meta = artifact.to_json()
    meta.pop("directory")
    (kernel_dir / KernelArtifact.META).write_text(json.dumps(meta, indent=1, default=repr))


def read_result(
    path: Path, compile_args: Any = None, factory: Any = None, *, verified: bool = False
) -> Any:
    """Load a result folder into an AutotuneResult with a ready kernel.

    Raises:
        CacheError: the folder is not a complete, safe, intact result.
    """
    import warnings

    from tileauto.jit.kernel import JITKernel
    from tileauto.result import AutotuneResult

    path = Path(path)
    if not verified:
        problem = disk.verify(path)
        if problem is not None:
            raise CacheError(f"{path}: {problem}")
    config = json.loads((path / "best_config.json").read_text())["config"]
    latency = json.loads((path / "latency.json").read_text())
    trials_data = json.loads((path / "trials.json").read_text())
    meta = json.loads((path / "kernel" / KernelArtifact.META).read_text())
    artifact = KernelArtifact.from_json(meta, directory=path / "kernel")
    try:
        kernel = JITKernel(artifact)
    except Exception as exc:  # noqa: BLE001 - another CPU or target: recompile the stored config
        if factory is None:
            raise CacheError(
                f"{path}: the stored library does not load on this machine ({exc}); pass factory= "
                f"(the @jit factory) to load_from_disk to recompile the stored best config"
            ) from exc
        warnings.warn(
            f"tileauto: the stored library in {path} does not load here ({str(exc).splitlines()[0]}); "
            f"recompiling the stored best config {config}",
            RuntimeWarning,
            stacklevel=3,
        )
        problem_file = path / "problem.json"
        problem_call = json.loads(problem_file.read_text()) if problem_file.is_file() else {}
        kernel = _recompile(factory, compile_args, artifact, config, problem_call)
    return AutotuneResult(
        config=config,
        latency=float(latency["latency_ms"]),
        ref_latency=latency.get("ref_latency_ms"),
        kernel=kernel,
        trials=tuple(Trial.from_json(t) for t in trials_data["trials"]),
        default_trial=Trial.from_json(trials_data["default"])
        if trials_data.get("default")
        else None,
        tuning_s=float(trials_data.get("tuning_s", 0.0)),
        cache_hit=True,
    )


def _recompile(
    factory: Any,
    compile_args: Any,
    artifact: KernelArtifact,
    config: dict[str, Any],
    problem: dict[str, Any],
) -> Any:
    from tileauto.jit.impl import JITImpl
    from tileauto.options import CompileArgs

    impl = factory if isinstance(factory, JITImpl) else None
    if impl is None:
        args = (
            compile_args
            if isinstance(compile_args, CompileArgs)
            else CompileArgs(out_idx=list(artifact.out_idx) or None, **(compile_args or {}))
        )
        impl = JITImpl(getattr(factory, "factory", factory), args)
    elif compile_args is not None:
        impl = impl.with_compile_args(
            **(compile_args if isinstance(compile_args, dict) else compile_args.__dict__)
        )
    args, kwargs = tuple(problem.get("args", ())), dict(problem.get("kwargs", {}))
    return impl(*args, **{**kwargs, **config})
