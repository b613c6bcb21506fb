"""Shipping a tuned kernel: write a result to a folder, load it in another process or machine.

The folder has the format of a cache entry (``docs/cache_format.md``). Loading runs the stored
library as is; where it cannot run (see :mod:`tileauto.result._portability`) the stored best config
is compiled again for this machine, with a warning. A save copies a loaded result's kernel
files only while they are the ones it was loaded with (:mod:`tileauto.result._origin`), and
stages beside the destination (:mod:`tileauto.result._staging`). The cache and the kernel
(torch) are imported when a folder is written or read, so that importing the record, which
imports this module (``from tileauto import AutotuneResult``), loads neither.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.errors import CacheError
from tileauto.options import CompileArgs
from tileauto.report.notes import note
from tileauto.result._destination import refused_destination
from tileauto.result._origin import changed_files
from tileauto.result._portability import (
    cannot_run_here,
    recompile,
    recompile_artifact,
    recompile_factory,
    with_out_idx,
)
from tileauto.result._staging import new_staging, sweep_staging
from tileauto.result._values import with_own_values

log = get_logger("shipping")


def save_result(result: Any, path: str | Path, *, verbose: bool = False) -> Path:
    """:meth:`AutotuneResult.save_to_disk <tileauto.result.record.AutotuneResult.save_to_disk>`."""
    from tileauto.cache import disk
    from tileauto.cache.entry import KIND_TUNED, fill_result
    from tileauto.cache.key import versions
    from tileauto.jit.target_memo import device_fingerprint

    path = _folder_path("save_to_disk", path)
    in_the_way = refused_destination(path)
    if in_the_way is not None:
        raise CacheError(f"save_to_disk({str(path)!r}): {in_the_way}")
    artifact, expected = _complete_artifact(result, path)
    to_save = replace(result, kernel=_Saved(artifact))
    meta = {
        **versions(),
        "kind": KIND_TUNED,
        "key": result.key,
        "kernel": kernel_name(result.kernel),
        **_stored_names(result),  # the factory's name, module, problem_key and family
        "target": artifact.target,
        "device": device_fingerprint(artifact.device_type),
    }
    staging = new_staging(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_staging(path)  # what saves killed before they were done left here
        with disk.scratch_folder(staging):  # a SIGTERM meanwhile removes it too
            disk.write_entry(
                path,
                lambda out: _fill_complete(to_save, out, fill_result, expected, path),
                meta,
                staging,
                shared=True,
            )
    except OSError as exc:
        raise _write_error(path, exc) from exc
    message = f"tileauto: saved {artifact.func_name} ({result.config}) to {path}"
    note(message, show=verbose)
    return path


def _folder_path(method: str, path: Any) -> Path:
    """``path``, a folder's path as text or a path object, made absolute (``~`` expanded).

    An empty path is refused: ``Path("")`` is the working directory, which a result was saved
    into (or loaded from) when a variable holding the folder was empty by mistake."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{method}: path must be a folder's path (a str or a pathlib.Path), "
            f"not {type(path).__name__} ({path!r})"
        )
    if os.fspath(path) == "":
        raise ValueError(
            f'{method}: path is empty; give a folder\'s path ("." for the working directory)'
        )
    return Path(path).expanduser().absolute()


def load_result(
    cls: Any, path: str | Path, compile_args: Any = None, *, factory: Any = None
) -> Any:
    """:meth:`AutotuneResult.load_from_disk <tileauto.result.record.AutotuneResult.load_from_disk>`."""
    from tileauto.cache import disk
    from tileauto.cache.entry import KIND_KERNEL, KIND_TUNED, REQUIRED_TUNED, read_result
    from tileauto.jit.kernel import JITKernel

    given = _folder_path("load_from_disk", path)
    args = _compile_args(compile_args)
    make = recompile_factory(factory)
    path, not_a_folder = _folder_to_read(given)
    if not_a_folder is None:
        not_a_folder = _no_result(given, path)
    if not_a_folder is not None:
        raise CacheError(f"load_from_disk({str(given)!r}): {not_a_folder}")
    if _manifest_kind(path) == KIND_KERNEL:  # before the files a tuned result must have
        raise CacheError(f"load_from_disk({str(given)!r}): {_PLAIN_KERNEL}")
    # A shipped folder may belong to root (installed in an image); others must not write it.
    problem = disk.verify(path, required=REQUIRED_TUNED, trusted_uids={os.getuid(), 0})
    if problem is not None:
        raise CacheError(f"load_from_disk({str(given)!r}): {problem}")
    try:
        manifest = disk.read_manifest(path)
        if manifest.get("kind", KIND_TUNED) != KIND_TUNED:
            raise CacheError(f"load_from_disk({str(given)!r}): {_PLAIN_KERNEL}")
        stored = _with_own_values(read_result(path, manifest))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheError(f"load_from_disk({str(given)!r}): unreadable records ({exc})") from exc
    artifact = stored.artifact
    if args is not None and args.out_idx is not None:
        artifact = with_out_idx(artifact, args.out_idx)
    reason = cannot_run_here(artifact, args)
    kernel = None
    if reason is None:
        try:
            kernel = JITKernel(artifact)
        except Exception as exc:  # noqa: BLE001 - any load failure: recompile instead
            reason = f"the library does not load: {_first_line(exc)}"
    if kernel is None:
        warnings.warn(
            f"tileauto: the kernel stored in {path} cannot run here ({reason}); "
            f"recompiling its best config {stored.config}",
            RuntimeWarning,
            stacklevel=3,
        )
        kernel = recompile(stored, artifact, args, make)
    rebuild = None
    if make is not None and stored.problem is not None:  # the factory can be called as tuned
        rebuild = functools.partial(recompile_artifact, stored, artifact, args, make)
    return cls.from_stored(stored, kernel, rebuild=rebuild)


_PLAIN_KERNEL = (
    "it holds a plain kernel (a @jit cache entry, kernels/<key>), not a tuned result: give "
    "the folder save_to_disk wrote or a tuned cache entry's (autotuner/<key>)"
)


def _manifest_kind(path: Path) -> Any:
    """The kind the folder's manifest names, or None when it names none or is unreadable
    (the verification that follows says what is wrong)."""
    from tileauto.cache import disk

    try:
        return disk.read_manifest(path).get("kind")
    except (OSError, ValueError):
        return None


def _with_own_values(stored: Any) -> Any:
    """The stored result with the winner's tuples in its trials (:func:`with_own_values`)."""
    trials, default = with_own_values(stored.trials, stored.default_trial, stored.config)
    if trials is stored.trials and default is stored.default_trial:
        return stored
    return replace(stored, trials=trials, default_trial=default)


def _folder_to_read(path: Path) -> tuple[Path, str | None]:
    """The folder to load for ``path`` (a link given as the folder itself is followed: what
    it points to is checked as any folder is, links inside refused), or why there is none
    (missing, a file, a link to neither)."""
    from tileauto.cache import disk

    give = "give the folder save_to_disk wrote (or a cache entry's)"
    try:
        kind = disk.path_kind(path)
        target = Path(os.path.realpath(path)) if kind == "link" else path
        target_kind = disk.path_kind(target) if kind == "link" else kind
    except OSError as exc:
        return path, f"the path cannot be read ({exc.strerror or exc})"
    if target_kind == "folder":
        return target, None
    if kind == "link":
        what = "which does not exist" if target_kind == "missing" else "which is not a folder"
        return path, f"a symbolic link to {target}, {what}: {give}"
    return path, f"{'no such folder' if kind == 'missing' else 'a file, not a folder'}: {give}"


def _no_result(given: Path, folder: Path) -> str | None:
    """``<given> holds no saved result (no manifest.json)``, with a hint at where the results
    are when it is a cache, a folder of saved results or a result's ``kernel/``; None when the
    folder has a manifest (the verification that follows checks it)."""
    from tileauto.cache.disk import MANIFEST, is_entry_key
    from tileauto.cache.entry import KERNEL_DIR, KIND_TUNED

    if os.path.lexists(folder / MANIFEST):
        return None
    said = f"{given} holds no saved result (no {MANIFEST})"
    try:
        below = sorted(p.name for p in folder.iterdir() if (p / MANIFEST).is_file())
        tuned = folder / KIND_TUNED
        entries = [p for p in tuned.iterdir() if is_entry_key(p.name)] if tuned.is_dir() else []
    except OSError:
        below, entries = [], []
    if entries:
        return (
            f"{said}: it is a tileauto cache; give one of its tuned entries, "
            f"{tuned}/<key> ({len(entries)} there: `tileauto cache list` names them)"
        )
    if below:
        more = f" and {len(below) - 5} more" if len(below) > 5 else ""
        names = ", ".join(f"{name}/" for name in below[:5])
        return f"{said}: it holds saved results one level down ({names}{more}); give one of them"
    if folder.name == KERNEL_DIR and (folder.parent / MANIFEST).is_file():
        return f"{said}: it is a saved result's {KERNEL_DIR}/ folder; give {folder.parent}"
    return f"{said}: give the folder save_to_disk wrote (or a cache entry's)"


def _complete_artifact(result: Any, path: Path) -> tuple[Any, Mapping[str, str | None] | None]:
    """The kernel's artifact with every file on disk and, for a loaded result, each file's
    sha256 as it was loaded (which the copies must have); compiled again when a file is gone
    or is no longer the one it was loaded with (another save or tuning replaced it).

    Raises:
        CacheError: a file is gone or changed and this result cannot compile the kernel again.
    """
    artifact = result.kernel.artifact
    origin = result.origin
    expected = None
    if origin is not None and Path(artifact.directory) == origin.kernel_dir:
        expected = origin.sha256
    missing = artifact.missing_files()
    changed = [] if missing or expected is None else changed_files(expected, artifact.directory)
    if not missing and not changed:
        return artifact, expected
    if missing:
        what = f"{_describe_gone(artifact, missing)} {_why_gone(result)}"
    else:
        what = (
            f"{_describe_files(artifact, changed, 'changed')} since this result was read from "
            f"{origin.where() if origin is not None else artifact.directory} (another "
            f"{'tuning' if origin is not None and origin.in_cache else 'save'} replaced it?)"
        )
    if result.rebuild is None:
        raise CacheError(
            f"save_to_disk({str(path)!r}): {what}, and this result cannot compile it again; "
            "nothing was saved. A result loaded with load_from_disk(..., factory=...) compiles "
            "its best config again for a save (as a tuned one does); without one, tune again"
        )
    log.warning("save_to_disk: %s; compiling the best config %s again", what, result.config)
    rebuilt = result.rebuild()
    still = rebuilt.missing_files()
    if still:
        raise CacheError(
            f"save_to_disk({str(path)!r}): the recompiled kernel in {rebuilt.directory} lacks "
            f"{', '.join(still)}; nothing was saved"
        )
    return rebuilt, None  # compiled just now, into a folder of this process's own


def _describe_gone(artifact: Any, missing: tuple[str, ...]) -> str:
    """``the kernel's library <path> is gone`` (or its other files), for messages."""
    return _describe_files(artifact, missing, "gone")


def _describe_files(artifact: Any, names: Sequence[str], state: str) -> str:
    """``the kernel's library <path> is gone`` (``state``), or ``changed``, or its other files,
    for messages."""
    if state == "gone":
        state = f"{'is' if len(names) == 1 or artifact.LIB_NAME in names else 'are'} {state}"
    if artifact.LIB_NAME in names:
        return f"the kernel's library {artifact.lib_path} {state}"
    return f"the kernel's {', '.join(names)} in {artifact.directory} {state}"


def _why_gone(result: Any) -> str:
    """A guess at why a file of the kernel is gone, from where the result came from."""
    origin = result.origin
    if origin is None:
        return "(its folder was removed?)"
    if origin.in_cache:
        return f"(its cache entry {origin.folder} was removed or replaced?)"
    return f"(the folder it was loaded from, {origin.folder}, was removed or replaced?)"


def kernel_name(kernel: Any) -> str:
    """The name a kernel is reported and saved under (its factory's, else its function's)."""
    origin = getattr(kernel, "origin", None)
    impl = origin[0] if origin else None
    artifact = getattr(kernel, "artifact", None)
    factory = getattr(impl, "factory", None)  # a JITImpl's: the name the table and log use
    return str(
        getattr(factory, "__qualname__", None)
        or getattr(impl, "__qualname__", None)
        or getattr(artifact, "func_name", None)
        or type(kernel).__name__
    )


def _write_error(path: Path, exc: OSError) -> OSError:
    """``exc`` said of the user's ``path``: a staging folder next to it (``.<name>.stage-*``,
    ``.stage-*``) is a name the user never gave, so the folder it is in is named instead."""
    where = str(exc.filename) if exc.filename is not None else ""
    try:
        first = Path(where).relative_to(path.parent).parts[0]
    except (ValueError, IndexError):
        first = ""
    if first.startswith(".") and first != path.name:
        where = str(path.parent)
    why = exc.strerror or str(exc)
    message = (
        f"save_to_disk({str(path)!r}): the folder could not be written "
        f"({why}{f': {where}' if where else ''}); nothing was saved"
    )
    # with its errno, OSError is the subclass the error was (PermissionError, say)
    return OSError(exc.errno, message) if exc.errno is not None else OSError(message)


# -- the names of the tuned problem --------------------------------------------------------------
# What a tuned cache entry's manifest names its problem by (``tileauto.cache.tuning``): the
# factory's name and module, the problem's key and its family; the cache prior finds it by them.
PROBLEM_NAMES = ("kernel", "module", "problem_key", "family")


def problem_names(manifest: dict[str, Any]) -> dict[str, str]:
    """The :data:`PROBLEM_NAMES` a manifest holds (as text)."""
    return {name: manifest[name] for name in PROBLEM_NAMES if isinstance(manifest.get(name), str)}


def reported_name(result: Any) -> str:
    """The name ``result``'s problem is reported under: its factory's, as the table, the log
    and ``cache list`` give it (the kernel's own name, often the PrimFunc's ``main``, when no
    stored name is known)."""
    return _stored_names(result).get("kernel") or kernel_name(result.kernel)


def _stored_names(result: Any) -> dict[str, str]:
    """The names of the problem ``result`` was stored under: kept by a result read from a
    cache entry or a saved folder, else read from the cache entry of its key (a new tuning's);
    empty when neither knows them (the tuning cache was off)."""
    from tileauto.cache.disk import read_manifest
    from tileauto.cache.entry import KIND_TUNED
    from tileauto.settings import Settings

    extra = result.extra if isinstance(result.extra, dict) else {}
    if isinstance(extra.get("entry"), dict):
        return problem_names(extra["entry"])
    if not isinstance(result.key, str) or not result.key:
        return {}
    try:
        manifest = read_manifest(Settings.from_env().cache_dir / KIND_TUNED / result.key)
    except (OSError, ValueError):  # no such entry (another store, or it was removed)
        return {}
    if manifest.get("kind") != KIND_TUNED or manifest.get("key") != result.key:
        return {}
    return problem_names(manifest)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _compile_args(compile_args: Any) -> Any:
    if compile_args is None or isinstance(compile_args, CompileArgs):
        return compile_args
    if isinstance(compile_args, dict):
        fields = [f.name for f in dataclasses.fields(CompileArgs)]
        unknown = sorted(set(compile_args) - set(fields), key=str)
        if unknown:
            raise TypeError(
                f"compile_args: {unknown} {'is not a field' if len(unknown) == 1 else 'are not fields'} "
                f"of CompileArgs; expected some of {fields}"
            )
        return CompileArgs(**compile_args)
    raise TypeError(
        f"compile_args must be a CompileArgs, a dict of its fields or None, got "
        f"{type(compile_args).__name__}"
    )


@dataclass(frozen=True)
class _Saved:
    """What ``fill_result`` reads of a kernel: its artifact (possibly recompiled)."""

    artifact: Any


def _fill_complete(
    result: Any,
    out: Path,
    fill: Callable[[Any, Path], None],
    expected: Mapping[str, str | None] | None,
    path: Path,
) -> None:
    """Fill a saved folder, refusing to publish one without every file of the kernel, or with
    a file other than the one ``expected`` (by name: its sha256 at load) records."""
    fill(result, out)
    written = result.kernel.artifact.moved_to(out / "kernel")
    missing = written.missing_files()
    if missing:
        raise CacheError(
            f"save_to_disk: {', '.join(missing)} could not be written; nothing was published"
        )
    changed = changed_files(expected, written.directory) if expected is not None else []
    if changed:  # replaced between the check and the copy
        raise CacheError(
            f"save_to_disk({str(path)!r}): "
            f"{_describe_files(result.kernel.artifact, changed, 'changed')} while it was being "
            "copied (another save or tuning replaced it?); nothing was saved"
        )
