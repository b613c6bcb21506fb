"""One cache entry as a folder of JSON records, the kernel's library and sources, a manifest.

    manifest.json      format, kind, key, versions, target, device, created, sha256 of each file
    best_config.json   {"config": {...}}                                    (tuned entries)
    latency.json       best / reference / default latency in ms, the best's statistics
    trials.json        every config's trial, the default config's, the tuning time
    problem.json       the problem arguments, when they are plain values (optional)
    kernel/            kernel.so, kernel.json (entry point, parameters, out_idx, target, config),
                       kernel_source.txt (device code), host_source.txt, kernel_script.py

Where JSON would lose a tuple (of a config or of the call), a record also holds its Python
literal (``"literal"``, read with ``ast.literal_eval`` and used only when it is the same record
as JSON sees it). A plain ``@jit`` entry (``kernels/<key>/``) holds the manifest and
``kernel/`` only. Loading needs no pickle: the shared library and the JSON files are all there
is.
"""

from __future__ import annotations

import ast
import errno
import json
import math
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto.artifact import KernelArtifact
from tileauto.records import Trial

KERNEL_DIR = "kernel"
KIND_TUNED = "autotuner"
KIND_KERNEL = "kernels"
KINDS = (KIND_TUNED, KIND_KERNEL)
REQUIRED = (f"{KERNEL_DIR}/{KernelArtifact.LIB_NAME}", f"{KERNEL_DIR}/{KernelArtifact.META}")
REQUIRED_TUNED = (*REQUIRED, "best_config.json", "latency.json", "trials.json")


@dataclass(frozen=True)
class StoredResult:
    """A tuned result read back from disk (the kernel is not loaded yet)."""

    path: Path
    manifest: dict[str, Any]
    config: dict[str, Any]
    latency_ms: float
    ref_latency_ms: float | None
    trials: tuple[Trial, ...]
    default_trial: Trial | None
    tuning_s: float
    artifact: KernelArtifact
    problem: dict[str, Any] | None


def required_files(kind: str) -> tuple[str, ...]:
    """The files an entry of ``kind`` must list in its manifest."""
    return REQUIRED_TUNED if kind == KIND_TUNED else REQUIRED


def write_kernel_dir(artifact: KernelArtifact, out: Path) -> None:
    """Copy the artifact's library and sources into ``out/kernel/`` with its description.

    Each source is opened without following a link and must be a file of this user's that
    nobody else can write (in a folder nobody else can write): a kernel another user could
    have swapped after it was validated is never cached.

    Raises:
        PermissionError: a file, or the artifact's folder, is not this user's own.
    """
    kernel_dir = out / KERNEL_DIR
    kernel_dir.mkdir()
    _check_own(artifact.directory, os.lstat(artifact.directory))
    for name in KernelArtifact.FILES:
        try:
            fd = os.open(artifact.directory / name, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        with open(fd, "rb") as src, open(kernel_dir / name, "xb") as dst:
            _check_own(artifact.directory / name, os.fstat(src.fileno()))
            shutil.copyfileobj(src, dst)
    meta = artifact.to_json()
    meta.pop("directory")
    (kernel_dir / KernelArtifact.META).write_text(json.dumps(meta, indent=1, default=repr))


def _check_own(path: Path, st: os.stat_result) -> None:
    """Refuse ``path`` unless it is a file or folder of this user's (or root's) that nobody
    else can write."""
    if stat.S_ISLNK(st.st_mode) or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise PermissionError(errno.EACCES, "not a plain file or folder: not cached", str(path))
    if st.st_uid not in (os.getuid(), 0) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(
            errno.EACCES,
            f"owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}: another user "
            "could have replaced it, so it is not cached",
            str(path),
        )


def read_artifact(entry_dir: Path) -> KernelArtifact:
    """The kernel description of an entry, pointing at the entry's own ``kernel/`` folder."""
    kernel_dir = Path(entry_dir) / KERNEL_DIR
    meta = json.loads((kernel_dir / KernelArtifact.META).read_text())
    return KernelArtifact.from_json(meta, directory=kernel_dir)


def fill_result(result: Any, out: Path) -> None:
    """Write a tuned result's records and kernel into ``out``.

    ``result`` is an :class:`~tileauto.result.record.AutotuneResult` (read by attribute: the cache
    does not import the api layer).
    """
    _dump(out / "best_config.json", config_record(result.config))
    best = result.best_trial
    _dump(
        out / "latency.json",
        {
            # strict JSON: no NaN (a config used without being timed), null instead
            "latency_ms": _finite(result.latency),
            "ref_latency_ms": _finite(result.ref_latency),
            "default_latency_ms": _finite(result.default_latency),
            "best": best.latency.to_json() if best is not None and best.latency else None,
        },
    )
    _dump(  # one trial per config: JSON's fast (C) encoder, which writes no indent
        out / "trials.json",
        {
            "trials": [t.to_json() for t in result.trials],
            "default": result.default_trial.to_json() if result.default_trial else None,
            "tuning_s": result.tuning_s,
        },
        indent=None,
    )
    problem = result.extra.get("problem") if isinstance(result.extra, dict) else None
    if problem is not None:
        _dump(out / "problem.json", with_literal(problem))
    write_kernel_dir(result.kernel.artifact, out)


def read_result(entry_dir: Path, manifest: dict[str, Any]) -> StoredResult:
    """Read a verified tuned entry.

    Raises:
        OSError, ValueError, KeyError, TypeError: a file is unreadable or malformed.
    """
    entry_dir = Path(entry_dir)
    config = config_of(_load(entry_dir / "best_config.json"))
    latency = _load(entry_dir / "latency.json")
    trials = _load(entry_dir / "trials.json")
    problem_path = entry_dir / "problem.json"
    return StoredResult(
        path=entry_dir,
        manifest=manifest,
        config=dict(config),
        latency_ms=math.nan if latency["latency_ms"] is None else float(latency["latency_ms"]),
        ref_latency_ms=latency.get("ref_latency_ms"),
        trials=tuple(Trial.from_json(t) for t in trials["trials"]),
        default_trial=Trial.from_json(trials["default"]) if trials.get("default") else None,
        tuning_s=float(trials.get("tuning_s", 0.0)),
        artifact=read_artifact(entry_dir),
        problem=without_literal(_load(problem_path)) if problem_path.is_file() else None,
    )


LITERAL = "literal"


def with_literal(body: dict[str, Any]) -> dict[str, Any]:
    """A record to store as JSON, with its Python literal beside it when JSON would not give
    it back equal (a tuple is a list in JSON): a config or a call keeps the user's values."""
    if json.loads(json.dumps(body, default=repr)) == body:
        return body
    return {**body, LITERAL: repr(body)}


def without_literal(record: dict[str, Any]) -> dict[str, Any]:
    """A record read back: its literal when that is the same record as JSON sees it
    (container types aside), else the JSON record."""
    body = {k: v for k, v in record.items() if k != LITERAL}
    literal = record.get(LITERAL)
    if not isinstance(literal, str):
        return body
    try:  # a literal only: nothing is run, whatever the record holds
        value = ast.literal_eval(literal)
        same = isinstance(value, dict) and json.loads(json.dumps(value)) == body
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return body
    return value if same else body


def config_record(config: dict[str, Any]) -> dict[str, Any]:
    """``best_config.json``'s record of the winner's config."""
    return with_literal({"config": config})


def config_of(record: dict[str, Any]) -> dict[str, Any]:
    """The config of a ``best_config.json`` record, with the user's tuples."""
    return dict(without_literal(record)["config"])


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _dump(path: Path, data: Any, indent: int | None = 1) -> None:
    path.write_text(json.dumps(data, indent=indent, sort_keys=True, default=repr))


def _load(path: Path) -> Any:
    return json.loads(path.read_text())
