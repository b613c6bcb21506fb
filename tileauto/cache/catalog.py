"""The cache as a whole: list, find, verify, clear, export and import entries (for the CLI).

Reads manifests and JSON only; never imports torch or TVM and never loads a kernel. The
staging dir is :mod:`tileauto.cache.scratch`'s, the logs :mod:`tileauto.cache.hygiene`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto.cache import disk, folders
from tileauto.cache._code import SOURCES_DIR as SOURCES_MEMO
from tileauto.cache._installed import MEMO_DIR as INSTALLED_MEMO
from tileauto.cache.disk import is_entry_key
from tileauto.cache.entry import (
    KIND_KERNEL,
    KIND_TUNED,
    KINDS,
    read_artifact,
    read_result,
    required_files,
)
from tileauto.cache.key import versions
from tileauto.cache.tuning import MEASUREMENTS
from tileauto.errors import CacheError
from tileauto.records import Trial

# the key's memos: installed/<32 hex>.json, sources/<sha256>.json
_MEMO = re.compile(r"^(?:[0-9a-f]{32}|[0-9a-f]{64})\.json$")
TRIALS_FORMAT = "tileauto-trials/1"
_YEAR_3000 = 32503680000.0  # a manifest's "created" past it (or NaN) is not a time


@dataclass(frozen=True)
class EntryInfo:
    """One entry folder, as far as its manifest tells (None fields: unreadable manifest)."""

    kind: str
    key: str
    path: Path
    manifest: dict[str, Any] | None
    size_bytes: int
    created: float

    @property
    def kernel(self) -> str:
        return str((self.manifest or {}).get("kernel") or "?")

    @property
    def module(self) -> str | None:
        """The factory's module, as entries record it (None for entries stored before it was
        recorded): see :func:`tileauto.cache.key.factory_module`."""
        module = (self.manifest or {}).get("module")
        return module if isinstance(module, str) and module else None

    @property
    def family(self) -> str | None:
        """The factory's call on every target and device (tuned entries record it; None for
        older entries): entries of one family are the same problem measured elsewhere."""
        family = (self.manifest or {}).get("family")
        return family if isinstance(family, str) and family else None

    @property
    def label(self) -> str:
        """``MODULE:NAME`` where the module is known, else the name: what ``cache prior``
        takes to name one module's kernel."""
        return f"{self.module}:{self.kernel}" if self.module else self.kernel

    @property
    def target(self) -> str:
        """A short target name: ``llvm znver3``, ``cuda sm_90a``."""
        raw = (self.manifest or {}).get("target")
        try:
            data = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
        except (ValueError, TypeError):
            return str(raw or "?")
        detail = data.get("arch") or data.get("mcpu") or ""
        return f"{data.get('kind', '?')} {detail}".strip()

    @property
    def latency_ms(self) -> float | None:
        """The best latency of a tuned entry (None for plain kernels or unreadable records)."""
        if self.kind != KIND_TUNED:
            return None
        try:
            return float(read_record(self, "latency.json")["latency_ms"])
        except (CacheError, ValueError, KeyError, TypeError):  # modified or unreadable: none
            return None

    @property
    def readable(self) -> bool:
        return self.manifest is not None


def _info(kind: str, path: Path) -> EntryInfo:
    manifest: dict[str, Any] | None = None
    if path.is_dir() and not path.is_symlink():
        try:
            manifest = disk.read_manifest(path)
        except (OSError, ValueError):
            manifest = None
    created = (manifest or {}).get("created")
    if not isinstance(created, (int, float)) or not 0 <= created < _YEAR_3000:  # NaN too
        try:
            created = path.stat().st_mtime
        except OSError:
            created = 0.0
    size = disk.dir_size(path) if not path.is_symlink() else 0
    return EntryInfo(kind, path.name, path, manifest, size, float(created))


def list_entries(root: Path, kinds: tuple[str, ...] = KINDS) -> list[EntryInfo]:
    """Every entry under ``root`` (staging leftovers excluded), oldest first.

    An entry is named by its key (32 hex digits): anything else in ``kernels/`` or
    ``autotuner/`` is not tileauto's (a ``--cache-dir`` that names a project folder with a
    ``kernels/`` of its own) and is never listed, verified or deleted. A file or symbolic link
    sitting at an entry path is listed too, so that ``verify`` reports it and ``clear`` removes
    it (a cache write replaces it as well).
    """
    out = []
    for kind in kinds:
        base = Path(root) / kind
        if not base.is_dir():
            continue
        for path in base.iterdir():
            if is_entry_key(path.name):
                out.append(_info(kind, path))
    return sorted(out, key=lambda e: (e.created, e.kind, e.key))


def find_entry(root: Path, key: str) -> EntryInfo:
    """The entry whose key is ``key`` or starts with it.

    Raises:
        CacheError: no entry matches, or a prefix matches several.
    """
    key = key.strip().lower()
    if not key:
        raise CacheError("the key is empty; `tileauto cache list` shows the keys")
    matches = [e for e in list_entries(root) if e.key.startswith(key)]
    if not matches:
        raise CacheError(
            f"no cache entry has the key {key!r} in {root}; `tileauto cache list` shows the keys"
        )
    exact = [e for e in matches if e.key == key]
    if len(exact) == 1:
        return exact[0]
    if len(matches) > 1:
        names = ", ".join(f"{e.kind}/{e.key}" for e in matches[:5])
        raise CacheError(
            f"the key prefix {key!r} matches {len(matches)} entries ({names}); give more of it"
        )
    return matches[0]


def verify_entry(info: EntryInfo, *, check_folders: bool = True) -> str | None:
    """What is wrong with an entry (hashes, ownership, permissions, versions), or None.

    ``check_folders=False``: the root and kind folders above it are not checked (a caller
    that checks them once, with :func:`folder_problems`).
    """
    problem = disk.verify(
        info.path,
        {"kind": info.kind, "key": info.key},
        required=required_files(info.kind),
        check_folders=check_folders,
    )
    if problem is not None:
        return problem
    unreadable = _unreadable_records(info)
    if unreadable is not None:
        return unreadable
    stale = _stale(info.manifest or {})
    if not stale:
        return None
    mine = versions()
    what = ", ".join(f"{_VERSION_NAMES[k]} {v} (this install: {mine[k]})" for k, v in stale)
    return f"stale: written by {what}; it will not be used"


def _unreadable_records(info: EntryInfo) -> str | None:
    """Why the records of an entry whose hashes verify cannot be read as a load reads them
    (written by hand, or re-signed: a list where an object belongs), or None."""
    try:
        if info.kind == KIND_TUNED:
            read_result(info.path, info.manifest or {})
        else:
            read_artifact(info.path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable records ({exc})"
    return None


# what differs from this install makes an entry stale: it is never found by a lookup
_VERSION_NAMES = {"tileauto": "tileauto", "tvm": "tvm", "format": "cache format"}


def _stale(manifest: dict[str, Any]) -> list[tuple[str, Any]]:
    """The (version name, the entry's value) that differ from this install's, the cache
    format included (an entry of format 1 or 2 is read, but never looked up)."""
    mine = versions()
    out = []
    for k in _VERSION_NAMES:
        value = manifest.get(k)
        if (str(value) if k == "format" and value is not None else value) != mine[k]:
            out.append((k, value))
    return out


def written_by_newer(info: EntryInfo) -> str | None:
    """Why an entry is of a newer install than this one (a later tileauto, TVM or cache format
    wrote it, and nothing of it is older), or None: such an entry is stale here, but a newer
    install sharing the cache folder uses it, so ``cache verify --delete`` leaves it alone.
    An entry whose versions cannot be compared is not called newer."""
    from packaging.version import InvalidVersion, Version

    stale = _stale(info.manifest or {})
    if not stale:
        return None
    mine = versions()
    for name, value in stale:
        try:
            if value is None or Version(str(value)) <= Version(str(mine[name])):
                return None
        except InvalidVersion:
            return None
    what = ", ".join(f"{_VERSION_NAMES[k]} {v} (this install: {mine[k]})" for k, v in stale)
    return f"written by a newer install: {what}"


def folder_problems(root: Path, kinds: tuple[str, ...] = KINDS) -> list[tuple[Path, str]]:
    """The cache's own folders (the root and each kind's) that are not safe, with why.

    Such a folder makes every entry in it refused by a load, but it is the folder that needs
    fixing (``chmod 700``), not the entries: ``cache verify`` reports it once and deletes
    nothing in it. A folder that does not exist is no problem.
    """
    out = []
    for folder in (Path(root), *(Path(root) / kind for kind in kinds)):
        try:
            if not os.path.lexists(folder):
                continue
            reason = folders.folder_problem(folder)
        except OSError as exc:
            reason = f"{folder} is unreadable ({exc.strerror or exc})"
        if reason is not None:
            out.append((folder, reason))
    return out


@dataclass(frozen=True)
class Removal:
    """One thing ``clear`` deletes: an entry, a problem's measurements, or a memo."""

    path: Path
    size_bytes: int
    entry: EntryInfo | None = None  # None: measurements or a memo


def clear_plan(
    root: Path, older_than_s: float | None = None, kinds: tuple[str, ...] = KINDS
) -> list[Removal]:
    """What :func:`clear` deletes, each thing once: what ``clear --dry-run`` lists.

    Entries (all, or those older than ``older_than_s``); the per-config measurements with
    the tuned entries (``measurements/<key>/``, by their newest file); with every kind, the
    key's memos (``installed/``, ``sources/``: worked out again when next needed). Only what
    tileauto names is taken: a key, or a memo's digest.
    """
    now = time.time()
    root = Path(root)
    plan = [
        Removal(info.path, info.size_bytes, info)
        for info in list_entries(root, kinds)
        if older_than_s is None or now - info.created >= older_than_s
    ]
    if KIND_TUNED in kinds:
        for problem_dir in _children(root / MEASUREMENTS, keyed=True):
            if older_than_s is None or now - disk.newest_mtime(problem_dir) >= older_than_s:
                plan.append(Removal(problem_dir, disk.dir_size(problem_dir)))
    if set(kinds) == set(KINDS):
        for name in (INSTALLED_MEMO, SOURCES_MEMO):
            for memo in _files(root / name):
                stat = memo.stat()
                if _MEMO.match(memo.name) and (
                    older_than_s is None or now - stat.st_mtime >= older_than_s
                ):
                    plan.append(Removal(memo, stat.st_size))
    return plan


def clear(
    root: Path, older_than_s: float | None = None, kinds: tuple[str, ...] = KINDS
) -> tuple[int, int]:
    """Delete what :func:`clear_plan` lists, and stale writes among the entries.

    Each entry is renamed away before it is deleted, so a process reading it sees it whole or
    not at all. The staging dir is left to :func:`tileauto.cache.scratch.remove_leftovers`.
    Returns (entries, bytes).

    Raises:
        CacheError: something could not be deleted; the message says what was deleted before.
    """
    count = size = 0
    for item in clear_plan(root, older_than_s, kinds):
        try:
            if item.entry is None and item.path.is_file():
                item.path.unlink()
            else:
                disk.remove_tree(item.path)
        except OSError as exc:
            raise CacheError(
                f"could not delete {item.path} ({exc.strerror or exc}); deleted {count} "
                f"entries ({size} bytes) before it"
            ) from None
        count += item.entry is not None
        size += item.size_bytes
    for kind in KINDS:
        disk.sweep(Path(root) / kind)
    return count, size


def _files(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_file() and not p.is_symlink()]
    except OSError:
        return []


def _children(path: Path, keyed: bool = False) -> list[Path]:
    """The folders in ``path`` not hidden; ``keyed``: only those named by a key (a problem's
    measurements), so that a folder of the user's is never taken for the cache's."""
    try:
        return [
            p
            for p in path.iterdir()
            if p.is_dir() and (is_entry_key(p.name) if keyed else not p.name.startswith("."))
        ]
    except OSError:
        return []


@dataclass(frozen=True)
class TrialRecords:
    """The trials of a tuned entry, as ``cache show`` and ``cache export --trials`` give them."""

    trials: tuple[Trial, ...]
    default: Trial | None
    best_index: int | None
    best_config: dict[str, Any]
    tuning_s: float
    #: how the search ran (a tuning's ``extra["search"]``); None in older entries
    search: dict[str, Any] | None = None


def read_record(info: EntryInfo, name: str) -> Any:
    """The JSON file ``name`` of an entry, read once and checked against its manifest's sha256.

    Raises:
        CacheError: the manifest does not list the file, it is unreadable, or it was modified.
        ValueError: it matches its sha256 but is not JSON.
    """
    files = (info.manifest or {}).get("files")
    want = files.get(name) if isinstance(files, dict) else None
    where = f"{info.kind}/{info.key}"
    if not isinstance(want, str):
        raise CacheError(
            f"{where}: {name} is not in its manifest; `tileauto cache verify` checks the entry"
        )
    try:
        data = (info.path / name).read_bytes()
    except OSError as exc:
        raise CacheError(f"{where}: {name} is unreadable ({exc})") from None
    if hashlib.sha256(data).hexdigest() != want:
        raise CacheError(
            f"{where}: {name} does not match its sha256 (truncated, corrupt or modified); "
            "`tileauto cache verify` checks the entry"
        )
    return json.loads(data)


def read_trials(info: EntryInfo) -> TrialRecords:
    """Every trial of a tuned entry, from an entry that verifies (an older version's too).

    Raises:
        CacheError: the entry is a plain ``@jit`` kernel, does not verify (a record edited
            after it was written, say), or its records are unreadable.
    """
    if info.kind != KIND_TUNED:
        raise CacheError(
            f"{info.kind}/{info.key} is a @jit kernel, not a tuned result: it has no trials"
        )
    problem = verify_entry(info)
    if problem is not None and not problem.startswith("stale"):
        raise CacheError(
            f"{info.kind}/{info.key} does not verify ({problem}); its trials are not read "
            "(`tileauto cache verify --delete` removes bad entries)"
        )
    try:
        # checked again as they are read: a file changed since the check is refused too
        data = read_record(info, "trials.json")
        config = read_record(info, "best_config.json")["config"]
        trials = tuple(Trial.from_json(t) for t in data["trials"])
        default = Trial.from_json(data["default"]) if data.get("default") else None
        tuning_s = float(data.get("tuning_s") or 0.0)
        search = data["search"] if isinstance(data.get("search"), dict) else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheError(
            f"{info.kind}/{info.key}: its trial records are unreadable ({exc}); "
            "`tileauto cache verify` checks it"
        ) from None
    best = next((t.index for t in trials if t.ok and t.config == config), None)
    return TrialRecords(trials, default, best, dict(config), tuning_s, search)


def trials_document(info: EntryInfo) -> dict[str, Any]:
    """A tuned entry's trials as one self-describing JSON object (``format``
    ``tileauto-trials/1``), for ``cache export --trials`` and tools that replay a tuning.

    Each trial holds ``index``, ``config``, ``status``, ``latency_ms`` (the median, None unless
    ok), ``compile_s``, ``run_s``, ``error``, and also ``latency`` (every statistic) and
    ``notes``, so that ``Trial.from_json`` reads it back.

    Raises:
        CacheError: as :func:`read_trials`.
    """
    records = read_trials(info)
    manifest = info.manifest or {}
    return {
        "format": TRIALS_FORMAT,
        "kernel": info.kernel,
        "module": info.module,
        "key": info.key,
        "kind": info.kind,
        "problem_key": manifest.get("problem_key"),
        "family": info.family,
        "target": manifest.get("target"),
        "device": manifest.get("device"),
        "versions": {k: manifest.get(k) for k in ("tileauto", "tvm", "format")},
        "created": info.created,
        "tuning_s": records.tuning_s,
        "search": records.search,
        "best_index": records.best_index,
        "best_config": records.best_config,
        "default": _trial_record(records.default) if records.default else None,
        "trials": [_trial_record(t) for t in records.trials],
    }


def _trial_record(trial: Trial) -> dict[str, Any]:
    data = trial.to_json()
    return {
        "index": trial.index,
        "config": trial.config,
        "status": trial.status.value,
        "latency_ms": trial.latency_ms,
        "compile_s": trial.compile_s,
        "run_s": trial.run_s,
        "error": trial.error,
        "latency": data["latency"],
        "notes": data["notes"],
        "validation": data["validation"],
    }


def export_entry(info: EntryInfo, dest: Path) -> Path:
    """Copy a verified entry to the folder ``dest`` (new or empty), readable by others.

    The copy is a complete entry: ``cache import`` puts it in another cache, and
    ``AutotuneResult.load_from_disk`` loads a tuned one directly. A new ``dest`` is
    published whole (staged beside it, then renamed); an existing empty one (the working
    directory, a mount point, a shared folder) is written into and stays the folder it was
    (:func:`~tileauto.cache.disk.publish`).

    Raises:
        CacheError: the entry does not verify, ``dest`` is a non-empty folder or a file, a
            file is in the way of its folder, or it cannot be written.
    """
    problem = verify_entry(info)
    if problem is not None and not problem.startswith("stale"):
        raise CacheError(f"{info.kind}/{info.key} does not verify ({problem}); not exported")
    dest = Path(dest).expanduser().absolute()
    if dest.is_symlink():
        # a link to an (empty) folder: the entry goes into the folder it names, and the
        # user's link stays as it is (it used to be replaced by a folder)
        if not dest.is_dir():
            raise CacheError(
                f"{dest} is a symbolic link to no folder ({os.readlink(dest)}); give a new folder"
            )
        dest = dest.resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise CacheError(f"{dest} exists and is not an empty folder; give a new folder")
    in_the_way = _not_a_folder_above(dest)
    if in_the_way is not None:
        raise CacheError(f"cannot write {dest}: {in_the_way}; give a path in a folder")
    manifest = dict(info.manifest or {})
    files = manifest.pop("files", None)
    if not isinstance(files, dict):
        raise CacheError(f"{info.kind}/{info.key}: its manifest lists no files; not exported")
    staging = dest.parent / f".{dest.name}.stage-{time.time_ns()}"
    try:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            staging.mkdir(mode=0o700)
        except OSError:
            if not dest.is_dir():
                raise
            # an empty folder in a folder not to be written (a mount point): staged elsewhere
            staging = Path(tempfile.mkdtemp(prefix="tileauto-export-"))
        try:
            disk.write_entry(
                dest, lambda out: _copy_files(info.path, out, files), manifest, staging, shared=True
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:  # named by the user's path, not the staging folder's
        raise CacheError(f"cannot write {dest}: {exc.strerror or exc}; nothing exported") from None
    return dest


def _not_a_folder_above(dest: Path) -> str | None:
    """What is in the way of ``dest``'s folder (a file, or a link to no folder, where a folder
    above ``dest`` would be made), said of that path; None when nothing is."""
    above = dest.parent
    while not os.path.lexists(above) and above != above.parent:
        above = above.parent
    if above.is_dir():
        return None
    if above.is_symlink():
        return f"{above} is a symbolic link to no folder ({os.readlink(above)})"
    return f"{above} is a file, not a folder"


def import_entries(
    src: Path,
    root: Path,
    staging_root: Path,
    on_refused: Callable[[Path, str], None] | None = None,
) -> list[tuple[str, str, str | None]]:
    """Copy the entry at ``src`` (or every entry folder inside ``src``) into the cache.

    ``src`` may also be another cache's root: its entries (the folders of ``autotuner/`` and
    ``kernels/`` named by a key) are imported, and nothing else of it (measurements, memos,
    logs, staging, folders of the user's).

    A ``src`` that is a symbolic link is followed (a link inside it is not: such an entry is
    refused). Hashes are checked first; the files become this user's. Returns (kind, key, note) per
    entry imported, where note says why it will not be used (other versions), if so.
    ``on_refused(path, why)``: an entry of a folder that cannot be imported is reported
    there and the others are imported still (without it, the first one raises).

    Raises:
        CacheError: ``src`` holds no entry, is this cache's own root, or an entry is
            corrupt or has no key.
    """
    src = Path(src).expanduser().absolute()
    if not src.exists():
        raise CacheError(f"{src} does not exist: expected an exported entry, or a folder of them")
    if src.is_symlink():  # the folder the user names may be a link: what it names is imported
        src = src.resolve()
    if (src / disk.MANIFEST).is_file():
        sources = [src]
    else:
        found = {p for p in _children(src) if (p / disk.MANIFEST).is_file()}
        found.update(_root_entries(src))  # a cache root: its autotuner/ and kernels/
        sources = sorted(found)
    if not sources:
        raise CacheError(
            f"{src} holds no tileauto entry (no manifest.json in it or in its sub-folders, "
            f"and no entry in an {KIND_TUNED}/ or {KIND_KERNEL}/ folder of a cache root)"
        )
    if any(p.parent.parent == src for p in sources) and _same_folder(src, Path(root)):
        raise CacheError(f"{src} is the cache itself: its entries are in it already")
    out = []
    for path in sources:
        try:
            out.append(_import_one(path, Path(root), staging_root))
        except CacheError as exc:
            if on_refused is None or path == src:  # one entry: its error is the command's
                raise
            on_refused(path, str(exc))
    return out


def _root_entries(src: Path) -> list[Path]:
    """The entries of a cache root ``src``: its ``autotuner/`` and ``kernels/`` folders named
    by a key and holding a manifest (none where ``src`` is no cache root)."""
    out = []
    for kind in KINDS:
        for path in _children(src / kind, keyed=True):
            if not path.is_symlink() and (path / disk.MANIFEST).is_file():
                out.append(path)
    return out


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (a cache not made yet): not the same
        return False


def _import_one(path: Path, root: Path, staging_root: Path) -> tuple[str, str, str | None]:
    if path.is_symlink():  # a link among the folders of the one imported: not followed
        raise CacheError(
            f"{path}: a symbolic link to {os.readlink(path)}, not an entry folder; not "
            "imported (import the folder it names)"
        )
    try:
        manifest = disk.read_manifest(path)
    except (OSError, ValueError) as exc:
        raise CacheError(f"{path}: unreadable manifest ({exc})") from None
    kind = manifest.get("kind", KIND_TUNED)
    key = manifest.get("key")
    if kind not in KINDS:
        raise CacheError(f"{path}: unknown entry kind {kind!r}")
    if not isinstance(key, str) or not is_entry_key(key):
        raise CacheError(
            f"{path} has no cache key (it was saved with the tuning cache off); load it with "
            "AutotuneResult.load_from_disk instead"
        )
    # The source may belong to someone else (a colleague's export): integrity only.
    owner = {path.stat().st_uid} | {p.lstat().st_uid for p in path.rglob("*")}
    problem = disk.verify(path, required=required_files(kind), trusted_uids=owner)
    if problem is not None:
        raise CacheError(f"{path}: {problem}; not imported")
    files = manifest.get("files")
    if not isinstance(files, dict):  # verify read the manifest again: it changed since
        raise CacheError(f"{path}: its manifest lists no files; not imported")
    stale = _stale(manifest)
    mine = versions()
    note = None
    if stale:
        names = [_VERSION_NAMES[k] for k, _ in stale]
        note = (
            "written by "
            + ", ".join(f"{n} {v}" for n, (_, v) in zip(names, stale))
            + "; this install has "
            + ", ".join(f"{n} {mine[k]}" for n, (k, _) in zip(names, stale))
            + ", so it will not be used"
        )
    final = root / kind / key
    if stale and disk.path_kind(final) == "folder":
        # an entry that would never be used must not replace one that is
        current = verify_entry(_info(kind, final))
        if current is None:
            raise CacheError(
                f"{path}: not imported: it was {note}, and the cache holds a current entry "
                f"of this key ({final}) that is kept"
            )
    meta = {k: v for k, v in manifest.items() if k != "files"}
    disk.write_entry(final, lambda out: _copy_files(path, out, files), meta, staging_root)
    return kind, key, note


def _copy_files(src: Path, out: Path, files: dict[str, Any]) -> None:
    """Copy the files a manifest lists (and nothing else in ``src``), each checked against
    its sha256 as copied: what is sealed into the new manifest is what was verified."""
    for rel, want in sorted(files.items()):
        if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts:
            raise CacheError(f"{src}: the manifest names a path outside the entry ({rel!r})")
        if rel == disk.MANIFEST:
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:  # a link swapped in since the check is refused, never followed
            fd = os.open(src / rel, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise CacheError(f"{src}: {rel} is unreadable ({exc.strerror or exc})") from None
        with open(fd, "rb") as f_in, open(target, "xb") as f_out:
            shutil.copyfileobj(f_in, f_out)
        if disk.sha256_file(target) != want:
            raise CacheError(
                f"{src}: {rel} changed while it was copied (it no longer matches its sha256)"
            )


__all__ = [
    "KIND_KERNEL",
    "KIND_TUNED",
    "TRIALS_FORMAT",
    "EntryInfo",
    "TrialRecords",
    "clear",
    "export_entry",
    "find_entry",
    "folder_problems",
    "import_entries",
    "is_entry_key",
    "list_entries",
    "read_record",
    "read_trials",
    "trials_document",
    "verify_entry",
    "written_by_newer",
]
