"""Entry folders on disk: staged, fsynced and renamed into place; verified by manifest on load."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

from tileauto._logging import get_logger

log = get_logger("cache")

MANIFEST = "manifest.json"


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) readable and writable by this user only."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_manifest(entry_dir: Path, meta: dict[str, Any]) -> None:
    """Hash every file of the entry into manifest.json (written last)."""
    files = {}
    for path in sorted(entry_dir.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            files[str(path.relative_to(entry_dir))] = sha256_file(path)
    manifest = {**meta, "files": files, "created": time.time()}
    (entry_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str))


def read_manifest(entry_dir: Path) -> dict[str, Any]:
    return json.loads((entry_dir / MANIFEST).read_text())


def unsafe_reason(entry_dir: Path) -> str | None:
    """Why an entry must not be loaded (not ours, or writable by others), or None if safe."""
    uid = os.getuid()
    for path in [entry_dir, *entry_dir.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            return f"{path} is a symbolic link"
        if st.st_uid != uid:
            return f"{path} is owned by uid {st.st_uid}, not by this user ({uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def verify(entry_dir: Path, expect: dict[str, Any] | None = None) -> str | None:
    """Check an entry: safe, complete, every hash matching. Returns the problem, or None."""
    if not entry_dir.is_dir():
        return "missing"
    reason = unsafe_reason(entry_dir)
    if reason is not None:
        return f"refused: {reason}"
    try:
        manifest = read_manifest(entry_dir)
    except (OSError, ValueError) as exc:
        return f"manifest unreadable ({exc}): partial or corrupt entry"
    for key, value in (expect or {}).items():
        if manifest.get(key) != value:
            return f"stale: {key} is {manifest.get(key)!r}, expected {value!r}"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "manifest lists no files"
    for rel, digest in files.items():
        path = entry_dir / rel
        if not path.is_file():
            return f"{rel} is missing"
        if sha256_file(path) != digest:
            return f"{rel} does not match its sha256 (corrupt or modified)"
    return None


def publish(staged: Path, final: Path) -> None:
    """Move a complete staged folder to ``final`` atomically (replacing an old entry)."""
    _fsync_tree(staged)
    final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if staged.parent != final.parent:
        sibling = final.parent / f".stage-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(staged, sibling)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copytree(staged, sibling)
            _fsync_tree(sibling)
            shutil.rmtree(staged, ignore_errors=True)
        staged = sibling
    trash = None
    if final.exists():
        trash = final.parent / f".trash-{uuid.uuid4().hex[:12]}"
        os.rename(final, trash)
    os.rename(staged, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def key_lock(root: Path, key: str, timeout_s: float = -1) -> Iterator[None]:
    """An inter-process lock for one key (released by the OS if the holder dies)."""
    locks = make_private_dir(root / ".locks")
    with FileLock(str(locks / f"{key}.lock"), timeout=timeout_s):
        yield


def warn(message: str) -> None:
    """One warning for a cache problem (the run goes on)."""
    warnings.warn(f"tileauto cache: {message}", RuntimeWarning, stacklevel=3)
    log.warning("%s", message)


def stage_dir(tmp_root: Path) -> Path:
    make_private_dir(tmp_root)
    path = tmp_root / f"stage-{uuid.uuid4().hex[:12]}"
    path.mkdir(mode=0o700)
    return path


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
