"""Entry folders on disk: staged writes, atomic publish, checks.

Writing an entry: fill a staging folder, :func:`seal` it (permissions, then ``manifest.json``
with the sha256 of every file, written last), and :func:`publish` it: every file and folder is
fsynced, then one ``rename`` puts it in place (or one ``renameat2(RENAME_EXCHANGE)`` swaps it
with the old entry). A process killed at any point leaves the old entry or the new one, plus
at worst a staging folder that :func:`sweep` removes later. An empty folder the user names
(``save_to_disk``, ``cache export``) is written into instead, its manifest last. Loading checks the manifest
(:func:`verify`): a missing, partial, corrupt, foreign or group/world-writable entry is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tileauto._logging import get_logger
from tileauto.cache import folders

log = get_logger("cache")
T = TypeVar("T")

MANIFEST = "manifest.json"
KNOWN_FORMATS = ("1", "2", "3")  # formats this code can read: an older one is stale, not unknown
STALE_S = 3600.0  # staging leftovers older than this belong to dead writers
_STAGE_PREFIXES = (".stage-", ".trash-", "stage-")


_KEY = re.compile(r"[0-9a-f]{32}")


def is_entry_key(name: str) -> bool:
    """Whether ``name`` is an entry folder's name: a key, 32 lowercase hex digits. Only such
    folders of ``autotuner/`` and ``kernels/`` are tileauto's to list, verify, prune or
    delete; anything else there (``my-notes/``, a ``.stage-*`` write) is left alone."""
    return _KEY.fullmatch(name) is not None  # fullmatch: `$` lets a final newline through


def sha256_file(path: Path) -> str:
    """The sha256 of a regular file, opened without following a link."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
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
    ship); never writable by others, whatever the umask. Every file must be this user's
    and is hashed through a descriptor that follows no link, so what the manifest vouches
    for is what this process staged in a folder nobody else can write.

    Raises:
        UnsafeDirError: the staging folder, or something in it, is not this user's own.
    """
    file_mode, dir_mode = (0o644, 0o755) if shared else (0o600, 0o700)
    folders.check_private(entry_dir)
    files = {}
    for path in sorted(entry_dir.rglob("*")):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{path} is a symbolic link: cache entries hold plain files only")
        if st.st_uid != os.getuid():
            raise folders.UnsafeDirError(
                errno.EACCES, f"refusing to seal {path}: it is owned by uid {st.st_uid}", str(path)
            )
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


def path_kind(path: Path) -> str:
    """What is at ``path``, a link not followed: ``"missing"``, ``"link"``, ``"folder"`` or
    ``"file"`` (anything else).

    Raises:
        OSError: it cannot be looked at (other than not being there).
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return "link"
    return "folder" if stat.S_ISDIR(st.st_mode) else "file"


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
    check_folders: bool = True,
) -> str | None:
    """Check an entry: safe, complete, of a known format, every hash matching.

    With the default ``trusted_uids`` (an entry of this user's cache, ``<root>/<kind>/<key>``)
    the two folders above it must be safe too (:func:`~tileauto.cache.folders.folder_problem`):
    otherwise another user could swap the entry between this check and the load.
    ``check_folders=False`` leaves those two folders out, for a caller that checks them once
    itself (``cache verify``: a folder's problem is not each entry's).

    Returns what is wrong (one line), or None when the entry can be loaded.
    """
    entry_dir = Path(entry_dir)
    try:
        kind = path_kind(entry_dir)
    except OSError as exc:
        return f"unreadable ({exc})"
    if kind == "missing":
        return "missing"
    if kind != "folder":
        what = "a symbolic link" if kind == "link" else "a file"
        return f"{what} sits at the entry path, not an entry folder; it will be replaced"
    try:
        reason = None
        if trusted_uids is None and check_folders:
            for folder in (entry_dir.parent, entry_dir.parent.parent):
                reason = reason or folders.folder_problem(folder)
        reason = reason or unsafe_reason(entry_dir, trusted_uids)
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
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2  # renameat2's flags


def _renameat2(a: Path, b: Path, flags: int) -> bool:
    """Rename ``a`` to ``b`` with renameat2's ``flags`` (Linux). False where the system
    cannot (no such call, or a file system without the flag); nothing is then done."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2). False where the system cannot."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def _rename_new(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, never over something there (a plain rename would replace a
    file, or an empty folder, that appeared at ``dst`` meanwhile).

    Raises:
        FileExistsError: something is at ``dst``; nothing was renamed.
    """
    if _renameat2(src, dst, _RENAME_NOREPLACE):
        return
    if os.path.lexists(dst):  # no such flag here: checked, then renamed
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def publish(staged: Path, final: Path, *, private: bool = True) -> None:
    """Move the complete, sealed folder ``staged`` to ``final`` atomically.

    An existing ``final`` (an entry, or a stray file or link) is swapped out in the same step
    and then removed. ``staged`` may live on another file system (``TILEAUTO_TMP_DIR``, or a
    private fallback): it is then copied next to ``final`` first, so the last step is still
    a rename; a copy that fails (a full disk) is removed, not left to fill the disk.
    ``private`` (cache entries, ``<root>/<kind>/<key>``): the kind folder and the root must
    be this user's own (:func:`~tileauto.cache.folders.folder_problem`).

    Not ``private`` (a folder the user names: ``save_to_disk``, ``cache export``): an
    existing empty folder at ``final``, or the folder a symbolic link there names, is written
    into (:func:`_fill_folder`), not replaced: it stays the folder it was (its inode, mode and
    owner), so a working directory, a mount point or a shared setgid folder keeps working.
    A folder that is replaced while this process works in it (``save_to_disk(".")`` over an
    earlier save) is entered again at the same path, so relative paths keep meaning the same
    place (another process working there, a shell, must ``cd`` again).
    """
    fsync_tree(staged)
    if not private and _is_empty_folder(final):
        _fill_folder(staged, final)
        return
    if private:
        root = final.parent.parent
        if os.path.lexists(root):
            folders.check_private(root)  # before anything is created in it
        parent = folders.make_private_dir(final.parent)
    else:
        parent = final.parent
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    moved = None
    inside = None if private else _cwd_under(final)
    try:
        if staged.parent != parent:
            staged = moved = _bring(staged, parent)
        _replace(staged, final, parent)
    except BaseException:
        if moved is not None:
            discard(moved)  # a partial or unpublished copy must not stay in the cache
        raise
    if moved is not None:
        _REMOVALS.paths.discard(moved)  # it is the entry now
    _fsync_dir(parent)
    if inside is not None:  # the old folder, where this process was, is gone: into the new one
        _enter(final, inside)


def _cwd_under(folder: Path) -> Path | None:
    """Where this process's working directory is in ``folder`` (``.``: the folder itself);
    None when it is not in it."""
    try:
        return Path(os.getcwd()).relative_to(Path(os.path.realpath(folder)))
    except (OSError, ValueError):
        return None


def _enter(folder: Path, inside: Path) -> None:
    """Make ``folder / inside`` (or ``folder``, where the new folder has no such place) the
    working directory again: the same path, now the folder that replaced the old one."""
    for place in (folder / inside, folder):
        try:
            os.chdir(place)
            return
        except OSError:
            continue


def _is_empty_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (a link to one included) with nothing in it."""
    try:
        with os.scandir(path) as items:
            return next(items, None) is None
    except OSError:  # nothing there, a file, or unreadable: not one to write into
        return False


def _bring(staged: Path, parent: Path) -> Path:
    """``staged`` moved to a new ``<parent>/.stage-<hex>`` (copied and flushed, from another
    file system), registered as under way: a SIGTERM removes it, as :func:`discard` does.

    Raises:
        OSError: it could not be moved or copied; nothing of it is left in ``parent``.
    """
    moved = parent / f".stage-{uuid.uuid4().hex[:12]}"
    removals = _REMOVALS
    try:
        with removals.lock:  # under way until published: a SIGTERM removes it
            removals.paths.add(moved)
            try:
                os.rename(staged, moved)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.copytree(staged, moved)
                fsync_tree(moved)
                shutil.rmtree(staged, ignore_errors=True)
    except BaseException:
        discard(moved)  # a partial copy must not stay
        raise
    return moved


def _fill_folder(staged: Path, folder: Path) -> None:
    """Move what the sealed ``staged`` holds into the existing empty ``folder``, the manifest
    last, keeping the folder itself.

    ``staged`` is first brought into ``folder`` (a hidden ``.stage-*``), so that each item
    then moves by a rename on the folder's own file system, a mount point's too. A reader
    refuses a folder without its manifest, so it never takes a half-written one; nothing in
    ``folder`` is replaced (an item that appeared there meanwhile fails the write). On a
    failure, or a SIGTERM, what was moved in is removed again: ``folder`` is left as it was.

    Raises:
        OSError: ``folder`` could not be written; the error names ``folder``, not the
            hidden staging path in it.
    """
    moved: list[Path] = []
    inner = None
    removals = _REMOVALS
    try:
        inner = _bring(staged, folder)
        names = sorted(name for name in os.listdir(inner) if name != MANIFEST)
        for name in [*names, MANIFEST]:
            if name == MANIFEST:
                _fsync_dir(folder)  # the items are in place before the manifest vouches for them
            target = folder / name
            with removals.lock:
                removals.paths.add(target)
                try:
                    _rename_new(inner / name, target)
                except BaseException:
                    removals.paths.discard(target)  # not ours: never deleted
                    raise
            moved.append(target)
        _fsync_dir(folder)
    except BaseException as exc:
        for path in reversed(moved):
            discard(path)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(folder)) from exc
        raise
    finally:
        if inner is not None:
            discard(inner)
    for path in moved:
        removals.paths.discard(path)  # the entry's own files now


def _replace(staged: Path, final: Path, parent: Path) -> None:
    """Rename ``staged`` to ``final``, swapping out whatever is there (entry, file or link)."""
    try:
        os.rename(staged, final)  # replaces nothing, or an empty folder
        return
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise
    if _exchange(staged, final):
        discard(staged)  # it now holds the old entry (or the stray file)
    else:  # no atomic swap here: a crash between these renames leaves no entry (a miss)
        trash = to_trash(final)
        os.rename(staged, final)
        discard(trash)


def discard(path: Path) -> None:
    """Delete a folder, file or link; gone already is fine. A delete under way (a path of
    :func:`to_trash` or :func:`probe_file`) is over once this returns."""
    try:
        _delete(path)
    finally:
        _REMOVALS.paths.discard(Path(path))


def _delete(path: Path) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def remove_tree(path: Path) -> None:
    """Delete an entry so that readers see it whole or not at all (rename, then delete).

    A stray file or link at an entry path is removed the same way.
    """
    try:
        trash = to_trash(Path(path))
    except FileNotFoundError:
        return
    discard(trash)


# -- deletes under way --------------------------------------------------------------------------
class _Removals:
    """The scratch this process has under way, which would be left behind if it died now:
    folders renamed to ``.trash-<hex>`` and not yet gone, probe files, and the staging folders
    of the entries being written (``stage-<hex>``, and ``.stage-<hex>`` beside the entry while
    it is published). A SIGTERM, or the exit after a Ctrl-C, ends the process while other
    threads are in the middle of theirs (a worker's reaper deleting its temp folder, a build
    slot storing a kernel): the handler takes ``lock`` for good (:func:`hold_removals`), so
    that no thread starts another, and deletes every one registered
    (:func:`finish_removals_now`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held across a rename (or a create) and its registration
        self.paths: set[Path] = set()


_REMOVALS = _Removals()


def _forget_removals_in_child() -> None:
    global _REMOVALS
    _REMOVALS = _Removals()  # a forked child's deletes are its parent's; its lock is free


os.register_at_fork(after_in_child=_forget_removals_in_child)


def to_trash(path: Path) -> Path:
    """Rename ``path`` to a new ``.trash-<hex>`` beside it (which no reader opens) and register
    the delete as under way; :func:`discard` the returned path to end it.

    Raises:
        OSError: the rename failed (``FileNotFoundError``: nothing at ``path``); nothing is
            registered.
    """
    trash = Path(path).parent / f".trash-{uuid.uuid4().hex[:12]}"
    removals = _REMOVALS
    with removals.lock:
        removals.paths.add(trash)
        try:
            os.rename(path, trash)
        except BaseException:
            removals.paths.discard(trash)
            raise
    return trash


@contextlib.contextmanager
def probe_file(directory: Path, prefix: str = ".probe-") -> Iterator[int]:
    """A new file ``<directory>/<prefix><8 hex>``, open for writing, deleted on the way out (and
    by a SIGTERM that comes meanwhile: :func:`finish_removals_now`). Yields its descriptor.

    Raises:
        OSError: the file cannot be created (a read-only or missing ``directory``).
    """
    path = Path(directory) / f"{prefix}{uuid.uuid4().hex[:8]}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with _under_way(path, lambda: os.open(path, flags, 0o600)) as fd:
        try:
            yield fd
        finally:
            os.close(fd)


@contextlib.contextmanager
def scratch_folder(path: Path) -> Iterator[Path]:
    """A new private folder at ``path`` (which must not exist), deleted with what it holds on
    the way out, and by a SIGTERM that comes meanwhile (:func:`finish_removals_now`).

    Raises:
        OSError: the folder cannot be made (it exists, or its parent is missing or read-only).
    """
    with _under_way(path, lambda: path.mkdir(mode=0o700)):
        yield path


@contextlib.contextmanager
def _under_way(path: Path, create: Callable[[], T]) -> Iterator[T]:
    """What ``create`` makes at ``path``, registered as under way from before it exists (the
    lock held across both) until it is deleted on the way out."""
    removals = _REMOVALS
    with removals.lock:
        removals.paths.add(path)
        try:
            made = create()
        except BaseException:
            removals.paths.discard(path)
            raise
    try:
        yield made
    finally:
        discard(path)


def hold_removals(timeout_s: float) -> None:
    """Take the lock of the deletes under way for good (the process is about to die of a
    SIGTERM): no other thread renames another folder to trash or creates another probe, and
    this one may go on (the lock is re-entrant). Waits at most ``timeout_s`` for a thread in
    the middle of a rename; takes no other lock."""
    _REMOVALS.lock.acquire(timeout=timeout_s)


def finish_removals_now() -> None:
    """Delete every folder and file registered as under way: the process is about to die, and
    the threads at work on them would leave them behind (``.trash-*`` are removed by the next
    run of their kind, probe files and staging folders after an hour). A staging folder is
    renamed away first: a thread still filling it then fails, rather than refill it."""
    for path in list(_REMOVALS.paths):
        with contextlib.suppress(OSError):
            if path.name.startswith(("stage-", ".stage-", "tileauto-stage-")):
                path = to_trash(path)
            _delete(path)


def stage_dir(tmp_root: Path) -> Path:
    """A new private staging folder under ``tmp_root`` (which must be this user's own).

    Raises:
        UnsafeDirError: ``tmp_root`` is not this user's own
            (see :func:`~tileauto.cache.folders.make_private_dir`).
        OSError: it cannot be created, or its file system is (nearly) full.
    """
    folders.make_private_dir(tmp_root)
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

    Staging that cannot be written (a full disk, a read-only or unsafe ``staging_root``)
    falls back to a private folder in the system temp dir; the publish then copies it over.

    Raises:
        OSError: the folder could not be written (full disk, read-only directory...).
    """
    try:
        staged, manifest = _stage(fill, meta, shared, lambda: stage_dir(staging_root))
    except OSError as exc:  # UnsafeDirError included: a refused folder is not written to
        log.info("cannot stage in %s (%s); staging in the system temp dir", staging_root, exc)
        staged, manifest = _stage(
            fill, meta, shared, lambda: Path(tempfile.mkdtemp(prefix="tileauto-stage-"))
        )
    try:
        publish(staged, Path(final), private=not shared)
    finally:
        discard(staged)  # gone already once published
    return manifest


def _stage(
    fill: Callable[[Path], None],
    meta: dict[str, Any],
    shared: bool,
    make: Callable[[], Path],
) -> tuple[Path, dict[str, Any]]:
    """A new staging folder from ``make``, filled and sealed (removed again on failure).

    Registered as under way from its creation (:func:`finish_removals_now`: a SIGTERM, or the
    exit after a Ctrl-C, while a thread fills it removes it, rather than leave it for an
    hour); none is made once the process holds the removals for good."""
    removals = _REMOVALS
    with removals.lock:
        staged = make()
        removals.paths.add(staged)
    try:
        fill(staged)
        return staged, seal(staged, meta, shared=shared)
    except BaseException:
        discard(staged)
        raise


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


# -- warnings ---------------------------------------------------------------------------------
class OnceWarner:
    """Warns once per message (an entry is read again under its lock: one warning, not two)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self._seen:
            self._seen.add(message)
            warn(message)


_WARNED = OnceWarner()


def warn_once(message: str) -> None:
    """:func:`warn`, once per message in this process (a refused folder, an unusable lock)."""
    _WARNED(message)


def warn(message: str) -> None:
    """One warning for a cache problem (the run goes on)."""
    warnings.warn(f"tileauto cache: {message}", RuntimeWarning, stacklevel=3)
    log.debug("%s", message)


def dir_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (or of ``path`` itself); links not followed."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            with contextlib.suppress(OSError):
                fst = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(fst.st_mode):
                    total += fst.st_size
    return total


def newest_mtime(path: Path) -> float:
    """The latest modification time of ``path`` and anything under it; links not followed."""
    newest = 0.0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames, "."):
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
    return newest
