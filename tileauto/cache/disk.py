"""Entry folders on disk: private directories, staged writes, atomic publish, locks, checks.

Writing an entry: fill a staging folder, :func:`seal` it (permissions, then ``manifest.json``
with the sha256 of every file, written last), and :func:`publish` it: every file and folder is
fsynced, then one ``rename`` puts it in place (or one ``renameat2(RENAME_EXCHANGE)`` swaps it
with the old entry). A process killed at any point leaves the old entry or the new one, plus
at worst a staging folder that :func:`sweep` removes later. Loading checks the manifest
(:func:`verify`): a missing, partial, corrupt, foreign or group/world-writable entry is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger

log = get_logger("cache")

MANIFEST = "manifest.json"
KNOWN_FORMATS = ("1",)
STALE_S = 3600.0  # staging leftovers older than this belong to dead writers
_STAGE_PREFIXES = (".stage-", ".trash-", "stage-")


def make_private_dir(path: Path) -> Path:
    """Create ``path`` and every missing parent with mode 0700 (``mkdir -p`` would use 0755)."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush every file and folder under ``root`` to disk."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            _fsync_file(os.path.join(dirpath, name))
        _fsync_dir(dirpath)


# -- manifest -----------------------------------------------------------------------------------
def seal(entry_dir: Path, meta: dict[str, Any], *, shared: bool = False) -> dict[str, Any]:
    """Fix permissions and write ``manifest.json`` (the sha256 of every file), last.

    Files become 0600 and folders 0700 (0644/0755 with ``shared``, for folders that users
    ship); never writable by others, whatever the umask.
    """
    file_mode, dir_mode = (0o644, 0o755) if shared else (0o600, 0o700)
    files = {}
    for path in sorted(entry_dir.rglob("*")):
        if path.is_symlink():
            raise ValueError(f"{path} is a symbolic link: cache entries hold plain files only")
        if path.is_dir():
            path.chmod(dir_mode)
        elif path.name != MANIFEST or path.parent != entry_dir:
            path.chmod(file_mode)
            files[path.relative_to(entry_dir).as_posix()] = sha256_file(path)
    manifest = {**meta, "created": meta.get("created", time.time()), "files": files}
    target = entry_dir / MANIFEST
    target.write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str))
    target.chmod(file_mode)
    entry_dir.chmod(dir_mode)
    return manifest


def read_manifest(entry_dir: Path) -> dict[str, Any]:
    """The manifest as a dict. Raises OSError or ValueError when it is unreadable."""
    data = json.loads((entry_dir / MANIFEST).read_text())
    if not isinstance(data, dict):
        raise ValueError("the manifest is not a JSON object")
    return data


def unsafe_reason(entry_dir: Path, trusted_uids: Iterable[int] | None = None) -> str | None:
    """Why an entry must not be loaded (foreign owner, writable by others, a link), or None."""
    uids = set(trusted_uids) if trusted_uids is not None else {os.getuid()}
    for path in [entry_dir, *entry_dir.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            return f"{path} is a symbolic link"
        if st.st_uid not in uids:
            return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def verify(
    entry_dir: Path,
    expect: dict[str, Any] | None = None,
    *,
    required: Iterable[str] = (),
    trusted_uids: Iterable[int] | None = None,
) -> str | None:
    """Check an entry: safe, complete, of a known format, every hash matching.

    Returns what is wrong (one line), or None when the entry can be loaded.
    """
    entry_dir = Path(entry_dir)
    if not entry_dir.is_dir():
        return "missing"
    try:
        reason = unsafe_reason(entry_dir, trusted_uids)
    except OSError as exc:
        return f"unreadable ({exc})"
    if reason is not None:
        return f"refused: {reason}"
    try:
        manifest = read_manifest(entry_dir)
    except (OSError, ValueError) as exc:
        return f"no readable manifest ({type(exc).__name__}): a partial or corrupt entry"
    if str(manifest.get("format")) not in KNOWN_FORMATS:
        return f"unknown format {manifest.get('format')!r} (a newer tileauto wrote it)"
    for name, value in (expect or {}).items():
        if manifest.get(name) != value:
            return f"stale: its {name} is {manifest.get(name)!r}, expected {value!r}"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "the manifest lists no files"
    for rel in required:
        if rel not in files:
            return f"{rel} is not in the manifest: an incomplete entry"
    for rel in files:
        if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts:
            return f"the manifest names a path outside the entry ({rel!r})"
    for rel, want in files.items():
        path = entry_dir / rel
        if not path.is_file():
            return f"{rel} is missing"
        try:
            got = sha256_file(path)
        except OSError as exc:
            return f"{rel} is unreadable ({exc})"
        if got != want:
            return f"{rel} does not match its sha256 (truncated, corrupt or modified)"
    return None


# -- publishing ---------------------------------------------------------------------------------
def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2). False where the system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(staged: Path, final: Path) -> None:
    """Move the complete, sealed folder ``staged`` to ``final`` atomically.

    An existing ``final`` is swapped out in the same step and then removed. ``staged`` may
    live on another file system (``TILEAUTO_TMP_DIR``): it is then copied next to ``final``
    first, so the last step is still a rename.
    """
    fsync_tree(staged)
    parent = make_private_dir(final.parent)
    if staged.parent != parent:
        sibling = parent / f".stage-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(staged, sibling)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copytree(staged, sibling)
            fsync_tree(sibling)
            shutil.rmtree(staged, ignore_errors=True)
        staged = sibling
    try:
        os.rename(staged, final)  # replaces nothing, or an empty folder
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        if _exchange(staged, final):
            remove_tree(staged)  # it now holds the old entry
        else:  # no atomic swap here: a crash between these renames leaves no entry (a miss)
            trash = parent / f".trash-{uuid.uuid4().hex[:12]}"
            os.rename(final, trash)
            os.rename(staged, final)
            shutil.rmtree(trash, ignore_errors=True)
    _fsync_dir(parent)


def remove_tree(path: Path) -> None:
    """Delete a folder so that readers see it whole or not at all (rename, then delete)."""
    path = Path(path)
    trash = path.parent / f".trash-{uuid.uuid4().hex[:12]}"
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def stage_dir(tmp_root: Path) -> Path:
    """A new private staging folder under ``tmp_root``."""
    make_private_dir(tmp_root)
    path = Path(tmp_root) / f"stage-{uuid.uuid4().hex[:12]}"
    path.mkdir(mode=0o700)
    return path


def write_entry(
    final: Path,
    fill: Callable[[Path], None],
    meta: dict[str, Any],
    staging_root: Path,
    *,
    shared: bool = False,
) -> dict[str, Any]:
    """Stage, fill, seal and publish one entry folder. Returns its manifest.

    Raises:
        OSError: the folder could not be written (full disk, read-only directory...).
    """
    staged = stage_dir(staging_root)
    try:
        fill(staged)
        manifest = seal(staged, meta, shared=shared)
        publish(staged, Path(final))
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return manifest


def sweep(directory: Path, max_age_s: float = STALE_S) -> int:
    """Remove staging leftovers of dead writers in ``directory``; returns how many."""
    removed = 0
    now = time.time()
    try:
        children = list(Path(directory).iterdir())
    except OSError:
        return 0
    for child in children:
        if not child.name.startswith(_STAGE_PREFIXES):
            continue
        try:
            if now - child.lstat().st_mtime < max_age_s:
                continue
        except OSError:
            continue
        shutil.rmtree(child, ignore_errors=True)
        removed += 1
    return removed


# -- locks, staging, warnings -------------------------------------------------------------------
@contextlib.contextmanager
def key_lock(
    lock_dir: Path, name: str, on_wait: Callable[[], None] | None = None
) -> Iterator[None]:
    """Hold the inter-process lock ``name`` (the OS releases it if the holder dies).

    ``on_wait`` is called once when another process holds the lock, before waiting for it.

    Raises:
        OSError: the lock file cannot be created (read-only cache directory).
    """
    from filelock import FileLock, Timeout

    make_private_dir(lock_dir)
    lock = FileLock(str(Path(lock_dir) / f"{name}.lock"), mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if on_wait is not None:
            on_wait()
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def best_effort_lock(
    lock_dir: Path, name: str, on_wait: Callable[[], None] | None = None
) -> Iterator[None]:
    """:func:`key_lock`, or no lock where it cannot be created (a read-only cache still works)."""
    try:
        lock = key_lock(lock_dir, name, on_wait)
        lock.__enter__()
    except OSError as exc:  # the save that follows will warn about the cache itself
        log.info("cannot lock %s (%s); going on without the lock", name, exc)
        yield
        return
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def writable_staging(settings: Any) -> Any:
    """``settings``, with staging moved to the system temp dir if its own is not writable.

    A read-only cache directory must not stop tuning: the kernel is built in a temp folder
    and returned, and the cache write that follows fails with a warning.
    """
    staging = settings.staging_dir
    try:
        make_private_dir(staging)
        fd, probe = tempfile.mkstemp(dir=staging, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
        return settings
    except OSError as exc:
        fallback = Path(tempfile.mkdtemp(prefix="tileauto-staging-"))
        # Not warned: the cache write that follows fails and says so, once.
        log.info("%s is not writable (%s); staging in %s instead", staging, exc, fallback)
        return dataclasses.replace(settings, tmp_dir=fallback)


class OnceWarner:
    """Warns once per message (an entry is read again under its lock: one warning, not two)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self._seen:
            self._seen.add(message)
            warn(message)


def warn(message: str) -> None:
    """One warning for a cache problem (the run goes on)."""
    warnings.warn(f"tileauto cache: {message}", RuntimeWarning, stacklevel=3)
    log.debug("%s", message)


def dir_size(path: Path) -> int:
    total = 0
    for p in Path(path).rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total
