"""Private folders: a cache folder is this user's own, and nobody else can write or swap it.

Decided by ownership and mode, never by trying to write (root may write anywhere). The cache
root, its staging and lock folders and its small JSON memos go through here.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from tileauto.utils.tmp import shared_tempdir

MIN_FREE_BYTES = 1 << 20  # a staging folder with less room than this would fail half-way
_FIX = (
    "make it yours and private (chown, chmod 700), or point TILEAUTO_CACHE_DIR or "
    "TILEAUTO_TMP_DIR at a folder of your own"
)


class UnsafeDirError(PermissionError):
    """A cache folder another user could write, or swap for one of theirs: it is not used."""


def folder_problem(path: Path, *, holder: bool = False) -> str | None:
    """Why ``path`` is not a safe folder for this user's cache, or None when it is.

    Decided by ownership and mode, never by trying to write (root may write anywhere). A
    cache folder must be owned by this user and not writable by group or others; a
    symbolic link counts as its owner and its target. With ``holder`` (the folder that holds
    the cache root, such as ``/tmp``), root may own it and a sticky bit makes it safe.
    """
    me = os.getuid()
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, 0):
        return f"{path} is a symbolic link owned by uid {link.st_uid}, not by this user"
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid != me and not (holder and st.st_uid == 0):
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {me})"
    sticky = holder and st.st_mode & stat.S_ISVTX
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def check_private(path: Path, *, holder: bool = False) -> None:
    """Raise :class:`UnsafeDirError` unless ``path`` is a safe folder (see :func:`folder_problem`)."""
    reason = folder_problem(path, holder=holder)
    if reason is not None:
        raise UnsafeDirError(errno.EACCES, f"refusing {reason}: {_FIX}", str(path))


def make_private_dir(path: Path, *, min_free_bytes: int = MIN_FREE_BYTES) -> Path:
    """Create ``path`` and every missing parent with mode 0700 (``mkdir -p`` would use 0755).

    Raises:
        UnsafeDirError: ``path`` is foreign-owned, writable by others or a foreign link, or
            the folder holding it lets others swap it (see :func:`folder_problem`).
        OSError: ``path`` cannot be created, is not a folder, or its file system has less
            than ``min_free_bytes`` free (ENOSPC: writes there would fail half-way).
    """
    path = Path(path)
    missing = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    check_private(path)
    if path.parent != path:
        check_private(path.parent, holder=True)
    if min_free_bytes > 0:
        try:
            vfs = os.statvfs(path)
        except OSError:
            return path
        if vfs.f_bavail * vfs.f_frsize < min_free_bytes:
            free_kib = vfs.f_bavail * vfs.f_frsize // 1024
            raise OSError(errno.ENOSPC, f"No space left on device ({free_kib} KiB free)", str(path))
    return path


def private_fallback_dir(purpose: str) -> Path:
    """A folder of this user's own in the system temp dir, for when the cache's is unusable.

    The temp dir this user's processes share (:func:`~tileauto.utils.tmp.shared_tempdir`): in a
    worker too, whose own temp folder is removed with it.

    ``<tmp>/tileauto-<uid>/<purpose>`` is shared by this user's processes (so locks still
    exclude each other); if someone else holds that name, a new private temp folder is used.
    """
    base = Path(shared_tempdir()) / f"tileauto-{os.getuid()}" / purpose
    try:
        return make_private_dir(base)
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"tileauto-{purpose}-", dir=shared_tempdir()))


def read_own_json(path: Path, *, check_folder: bool = False) -> Any:
    """The JSON in ``path``, or None when it is missing, malformed or not safe to trust: not a
    regular file of this user's that nobody else can write (opened without following a link
    and checked through its descriptor), or, with ``check_folder``, in a folder that is not
    private (:func:`folder_problem`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with open(fd) as f:
            st = os.fstat(f.fileno())
            if (
                not stat.S_ISREG(st.st_mode)
                or st.st_uid != os.getuid()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                or (check_folder and folder_problem(Path(path).parent) is not None)
            ):
                return None
            return json.load(f)
    except (OSError, ValueError):
        return None
