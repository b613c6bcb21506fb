"""One cache entry as a folder of JSON records, the kernel's library and sources, a manifest.

    manifest.json      format, kind, key, versions, target, device, created, sha256 of each file
    best_config.json   {"config": {...}}                                    (tuned entries)
    latency.json       best / reference / default latency in ms, the best's statistics
    trials.json        every config's trial, the default config's, the tuning time
    problem.json       the problem arguments, when they are plain values, and the tuning's
                       compile arguments (pass_configs, target_host, execution_backend) (optional)
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
import contextlib
import errno
import json
import math
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto.artifact import KernelArtifact
from tileauto.options import EXECUTION_BACKENDS
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
    #: the tuning's compile arguments (:func:`compile_args_record`); None: an older entry
    compile_args: dict[str, Any] | None = None
    #: how the search ran (``AutotuneResult.extra["search"]``); None: an older entry
    search: dict[str, Any] | None = None


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
    meta = _load_object(kernel_dir / KernelArtifact.META)
    with _malformed(KernelArtifact.META):
        return _consistent(KernelArtifact.from_json(meta, directory=kernel_dir))


def _consistent(artifact: KernelArtifact) -> KernelArtifact:
    """``artifact``, once its outputs are known to be some of its parameters.

    Raises:
        ValueError: ``out_idx`` names a parameter it does not have, or one twice.
    """
    count = len(artifact.params)
    out_idx = list(artifact.out_idx)
    bad = [
        i for i in out_idx if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count
    ]
    if bad or len(set(out_idx)) != len(out_idx):
        raise ValueError(
            f"kernel.json: out_idx {out_idx} does not name distinct parameters of the "
            f"{count} it lists (expected positions 0 to {count - 1})"
        )
    return artifact


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
    extra = result.extra if isinstance(result.extra, dict) else {}
    search = extra.get("search")
    _dump(  # one trial per config: JSON's fast (C) encoder, which writes no indent
        out / "trials.json",
        {
            "trials": [t.to_json() for t in result.trials],
            "default": result.default_trial.to_json() if result.default_trial else None,
            "tuning_s": result.tuning_s,
            # how the search ran: strategy, stop reason, counts, the prior's records
            **({"search": search} if isinstance(search, dict) and _plain(search) else {}),
        },
        indent=None,
    )
    problem = {**(extra.get("problem") or {})}
    if extra.get("compile_args") is not None:  # what a recompile elsewhere builds with
        problem[COMPILE_ARGS] = extra["compile_args"]
    if problem:
        _dump(out / "problem.json", with_literal(problem))
    write_kernel_dir(result.kernel.artifact, out)


def read_result(entry_dir: Path, manifest: dict[str, Any]) -> StoredResult:
    """Read a verified tuned entry.

    Raises:
        OSError, ValueError, KeyError, TypeError: a file is unreadable or malformed.
    """
    entry_dir = Path(entry_dir)
    with _malformed("best_config.json"):
        config = config_of(_load_object(entry_dir / "best_config.json"))
    latency = _load_object(entry_dir / "latency.json")
    trials = _load_object(entry_dir / "trials.json")
    problem_path = entry_dir / "problem.json"
    problem = without_literal(_load_object(problem_path)) if problem_path.is_file() else None
    compile_args = _compile_args_of(problem.pop(COMPILE_ARGS, None) if problem else None)
    with _malformed("latency.json or trials.json"):
        return _stored(entry_dir, manifest, config, latency, trials, problem, compile_args)


def _stored(
    entry_dir: Path,
    manifest: dict[str, Any],
    config: dict[str, Any],
    latency: dict[str, Any],
    trials: dict[str, Any],
    problem: dict[str, Any] | None,
    compile_args: dict[str, Any] | None,
) -> StoredResult:
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
        problem=problem or None,  # only compile arguments: no call to give a factory
        compile_args=compile_args,
        search=trials["search"] if isinstance(trials.get("search"), dict) else None,
    )


COMPILE_ARGS = "compile_args"
#: the compile arguments a tuned entry keeps: a recompile on another machine uses them (its
#: target is this machine's, and ``out_idx`` is the kernel's own)
STORED_COMPILE_ARGS = ("target_host", "execution_backend", "pass_configs")


def compile_args_record(compile_args: Any) -> dict[str, Any]:
    """The tuning's compile arguments as plain JSON values, for ``problem.json``.

    ``compile_args`` is a :class:`~tileauto.options.CompileArgs`. A target host given as a
    ``tvm.target.Target`` is kept as its JSON; a pass option whose value is no plain value
    (nothing JSON or a Python literal gives back) is left out, as it cannot be stored.
    """
    host = compile_args.target_host
    if host is not None and not isinstance(host, (str, dict)):
        host = _json_or_text(str(host))  # a tvm Target prints as its JSON
    passes = {
        str(name): value
        for name, value in (compile_args.pass_configs or {}).items()
        if _plain(value)
    }
    return {
        "target_host": host if host is None or _plain(host) else str(host),
        "execution_backend": compile_args.execution_backend,
        "pass_configs": passes or None,
    }


def _compile_args_of(record: Any) -> dict[str, Any] | None:
    """The stored compile arguments (:data:`STORED_COMPILE_ARGS`), or None when none are.

    Raises:
        ValueError: the record is not a dict of those fields, or its pass_configs no dict.
    """
    if record is None:
        return None
    if not isinstance(record, dict) or not set(record) <= set(STORED_COMPILE_ARGS):
        raise ValueError(
            f"problem.json: compile_args must be a dict of {list(STORED_COMPILE_ARGS)}, "
            f"got {record!r:.200}"
        )
    if not isinstance(record.get("pass_configs") or {}, dict):
        raise ValueError(f"problem.json: pass_configs must be a dict, got {record!r:.200}")
    if record.get("execution_backend", "auto") not in (None, *EXECUTION_BACKENDS):
        raise ValueError(
            f"problem.json: execution_backend must be one of {EXECUTION_BACKENDS}, "
            f"got {record.get('execution_backend')!r}"
        )
    return dict(record)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _plain(value: Any) -> bool:
    """A value a record gives back: JSON's own, or tuples of them (kept by the literal)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


LITERAL = "literal"


def with_literal(body: dict[str, Any]) -> dict[str, Any]:
    """A record to store as JSON, with its Python literal beside it when JSON would not give
    it back equal (a tuple is a list in JSON): a config or a call keeps the user's values."""
    if json.loads(json.dumps(body, default=repr)) == body:
        return body
    return {**body, LITERAL: repr(body)}


def without_literal(record: dict[str, Any]) -> dict[str, Any]:
    """A record read back: its literal when that is the same record as JSON sees it
    (container types aside), else the JSON record.

    Raises:
        ValueError: the record is not a JSON object.
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
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
    """The config of a ``best_config.json`` record, with the user's tuples.

    Raises:
        ValueError: the record holds no config object.
    """
    config = without_literal(record).get("config")
    if not isinstance(config, dict):
        raise ValueError(f"best_config.json: expected a config object, got {config!r:.80}")
    return dict(config)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _dump(path: Path, data: Any, indent: int | None = 1) -> None:
    path.write_text(json.dumps(data, indent=indent, sort_keys=True, default=repr))


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _load_object(path: Path) -> dict[str, Any]:
    """A record file that must hold a JSON object (its hashes may verify while it holds
    another value: an entry written by hand, or re-signed).

    Raises:
        ValueError: it holds another JSON value.
    """
    data = _load(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: expected a JSON object, got {type(data).__name__}")
    return data


@contextlib.contextmanager
def _malformed(name: str) -> Iterator[None]:
    """Records of the wrong shape inside (a list where an object belongs, a key missing) raise
    AttributeError, IndexError, KeyError or TypeError deep in their parsing: a malformed entry, said as one, which
    every reader takes as a miss or a refusal, never as a crash."""
    try:
        yield
    except (AttributeError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"{name}: malformed ({type(exc).__name__}: {exc})") from None
