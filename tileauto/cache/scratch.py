"""Scratch folders: claimed by the process that uses them, removed once no process does.

A scratch folder (a tuning's builds ``tune-*``, a process's ``proc-*``, a compile worker's temp
folder ``work-*``, a Ray run actor's kernels ``run-*``) is claimed by an ``flock`` on its ``.owner`` file (:func:`claim_scratch_dir`),
which the system drops however its process dies; :func:`remove_leftovers` takes that lock
before it decides, so a folder in use is never touched. The rules: ``docs/cache_format.md``
("Leftovers and logs"). Reads and deletes files only: no torch, no TVM.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.cache import disk, folders

log = get_logger("cache")

__all__ = [
    "OWNER",
    "Cleanup",
    "Leftover",
    "ScratchDir",
    "claim_scratch_dir",
    "process_running_since",
    "process_start",
    "remove_leftovers",
]

OWNER = ".owner"  # in each scratch folder; its flock is held by the process using the folder
_CLAIM_TRIES = 8
# Children of the staging dir that tileauto makes; anything else there is left alone.
_SCRATCH = re.compile(r"^(?P<kind>tune|proc|work|run)-(?:(?P<pid>\d+)-)?[0-9a-z_]+$")
_AGED = re.compile(r"^(?:stage-|\.stage-|\.probe-)[0-9a-z_]+$")  # short writes: age rule
_TRASH = re.compile(r"^\.trash-[0-9a-f]+$")  # a delete in progress or interrupted: no reader
_LOCK_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF)


# -- claiming a scratch folder (producers) -------------------------------------------------------
class ScratchDir:
    """A scratch folder this process claimed: :func:`remove_leftovers` leaves it alone.

    Hold it as long as the folder is used; :meth:`remove` deletes the folder, then lets go.
    Forked children share the claim (they inherit the locked descriptor); it ends with the last
    of them, or when the process dies.
    """

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        """Let go of the claim, keeping the folder (a later ``clear`` may then remove it)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def remove(self) -> None:
        """Delete the folder, then let go of the claim (gone already is fine)."""
        # renamed first: a cleaner never finds it half deleted and unclaimed
        trash = self.path.parent / f".trash-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(self.path, trash)
        except OSError:
            trash = self.path
        shutil.rmtree(trash, ignore_errors=True)
        self.release()

    def __enter__(self) -> ScratchDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"ScratchDir({str(self.path)!r}, claimed={self._fd is not None})"


def claim_scratch_dir(parent: Path, prefix: str) -> ScratchDir:
    """Create ``<parent>/<prefix>-<pid>-<hex>`` and claim it for this process.

    ``parent`` (the staging dir) is created private first. A cleaner that removed the new
    folder before the claim took hold is noticed (the locked ``.owner`` is not the one at the
    path any more) and another folder is made. Where the file system has no ``flock``, the
    folder is returned unclaimed; cleaners then go by its age and process id.

    Raises:
        UnsafeDirError: ``parent`` is not this user's own (see ``folders.make_private_dir``).
        OSError: the folder cannot be created.
    """
    folders.make_private_dir(Path(parent))
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()})
    for _ in range(_CLAIM_TRIES):
        path = Path(parent) / f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path.mkdir(mode=0o700)
        owner = path / OWNER
        try:
            fd = os.open(owner, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            continue  # a cleaner renamed the new folder away already
        try:
            locked = _lock(fd, blocking=True)  # a cleaner holds it only to rename the folder
            if not os.path.samestat(os.fstat(fd), os.stat(owner)):
                raise FileNotFoundError(errno.ENOENT, "claimed folder was replaced", str(path))
            os.ftruncate(fd, 0)
            os.write(fd, record.encode())
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            shutil.rmtree(path, ignore_errors=True)
            raise
        if not locked:
            os.close(fd)
            log.info("no flock on %s: the scratch folder %s is not claimed", parent, path)
            return ScratchDir(path, None)
        return ScratchDir(path, fd)
    raise OSError(errno.EAGAIN, f"could not claim a scratch folder in {parent}", str(parent))


def _lock(fd: int, *, blocking: bool) -> bool | None:
    """Lock ``fd`` exclusively: True; held by another (non-blocking only): False; None where
    the file system has no ``flock``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in _LOCK_UNSUPPORTED:
            return None
        raise


# -- leftovers of killed runs (cleaners) ---------------------------------------------------------
@dataclass(frozen=True)
class Leftover:
    """A staging folder or file no live process uses, with its size and why it is a leftover."""

    path: Path
    size_bytes: int
    why: str


@dataclass(frozen=True)
class Cleanup:
    """What :func:`remove_leftovers` removed (or would remove) and the folders kept in use."""

    removed: tuple[Leftover, ...]
    in_use: tuple[Path, ...]

    @property
    def size_bytes(self) -> int:
        return sum(item.size_bytes for item in self.removed)


def remove_leftovers(
    staging: Path, *, dry_run: bool = False, now: float | None = None, only: str | None = None
) -> Cleanup:
    """Remove what killed runs left in the staging dir ``staging``; keep what is in use.

    Scratch folders (``tune-*``, ``proc-*``, a worker's temp folder ``work-*``) go when no
    process holds their claim (see the module's docstring); interrupted writes (``stage-*``,
    ``.stage-*``, ``.probe-*``) once older than ``disk.STALE_S``; interrupted deletes
    (``.trash-*``) at once. Other names are never touched: the staging dir may be a folder of
    yours with other things in it. ``dry_run`` decides the same way and removes nothing;
    ``only`` (such as ``"work"``) looks at the scratch folders of that kind alone.
    """
    now = time.time() if now is None else now
    removed: list[Leftover] = []
    in_use: list[Path] = []
    try:
        children = sorted(Path(staging).iterdir())
    except OSError:
        return Cleanup((), ())
    for child in children:
        name = child.name
        try:
            st = child.lstat()
        except OSError:
            continue
        if st.st_uid != os.getuid():
            continue  # not ours to judge (a private staging dir holds none of these)
        scratch = _SCRATCH.match(name)
        if only is not None and (scratch is None or scratch.group("kind") != only):
            continue
        if scratch and stat.S_ISDIR(st.st_mode):
            item = _scratch_leftover(child, now, dry_run)
        elif _TRASH.match(name):
            item = Leftover(child, disk.dir_size(child), "an interrupted delete")
            if not dry_run:
                with contextlib.suppress(OSError):
                    disk.discard(child)
        elif _AGED.match(name) and now - st.st_mtime >= disk.STALE_S:
            age = _age_text(now - st.st_mtime)
            item = Leftover(child, disk.dir_size(child), f"an interrupted write, {age} old")
            if not dry_run:
                with contextlib.suppress(OSError):
                    disk.discard(child)
        else:
            continue
        if item is None:
            in_use.append(child)
        else:
            removed.append(item)
    return Cleanup(tuple(removed), tuple(in_use))


def _scratch_leftover(path: Path, now: float, dry_run: bool) -> Leftover | None:
    """Decide about one scratch folder under its claim lock; remove it unless ``dry_run``.

    Returns None when the folder is in use (or cannot be judged).
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    newest = disk.newest_mtime(path)  # before a lock file made here changes it
    try:
        fd = os.open(path / OWNER, flags)
    except FileNotFoundError:
        if dry_run:  # an older tileauto's folder (or one being made): judged without a lock
            return _leftover(path, _unclaimed_leftover(path, newest, now))
        try:  # the lock a claimant of this folder will wait for (see claim_scratch_dir)
            fd = os.open(path / OWNER, flags | os.O_CREAT, 0o600)
        except OSError:
            return None
    except OSError:
        return None  # not a folder we can write: not ours to remove
    try:
        locked = _lock(fd, blocking=False)
        if locked is False:
            return None  # claimed by a running process
        claim = _read_claim(fd) if locked else None
        why: str | None
        if claim is not None:
            why = f"its process (pid {claim.get('pid', '?')}) has ended"
        else:  # an older tileauto's folder, or no flock here: go by age and process id
            why = _unclaimed_leftover(path, newest, now)
        if why is None:
            return None
        size = disk.dir_size(path)
        trash = None
        if not dry_run:
            trash = path.parent / f".trash-{uuid.uuid4().hex[:12]}"
            try:
                os.rename(path, trash)  # under the lock: a claimant waiting for it sees it go
            except OSError:
                return None
    finally:
        os.close(fd)
    if trash is not None:
        with contextlib.suppress(OSError):
            disk.discard(trash)
    return Leftover(path, size, why)


def _leftover(path: Path, why: str | None) -> Leftover | None:
    return None if why is None else Leftover(path, disk.dir_size(path), why)


def _read_claim(fd: int) -> dict[str, Any] | None:
    """The claim record in a locked ``.owner`` (None: empty, so never claimed)."""
    try:
        data = os.pread(fd, 4096, 0)
    except OSError:
        return None
    if not data:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _unclaimed_leftover(path: Path, newest: float, now: float) -> str | None:
    """Why an unclaimed folder, last changed at ``newest``, is a leftover (None: it may
    still be in use)."""
    if now - newest < disk.STALE_S:
        return None
    m = _SCRATCH.match(path.name)
    pid = int(m.group("pid")) if m and m.group("pid") else None
    if pid is not None and process_running_since(pid, newest):
        return None
    unchanged = f"unchanged for {_age_text(now - newest)}"
    return f"{unchanged}, its process (pid {pid}) has ended" if pid is not None else unchanged


def process_running_since(pid: int, when: float) -> bool:
    """Whether process ``pid`` runs and started no later than ``when`` (so it is not a new
    process that reuses the id)."""
    start = process_start(pid)
    return start is not None and start <= when + 1.0  # start times are rounded to clock ticks


def process_start(pid: int) -> float | None:
    """When process ``pid`` started (Unix time), or None when none runs (a zombie has ended).
    A process this user may not inspect counts as running since the epoch."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        return 0.0


def _age_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"
