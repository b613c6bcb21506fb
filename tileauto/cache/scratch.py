"""Scratch folders: claimed by the process that uses them, removed once no process does.

A scratch folder (a tuning's builds ``tune-*``, a process's ``proc-*``, a compile worker's temp
folder ``work-*``, a Ray run actor's kernels ``run-*``) is claimed by an ``flock`` on its ``.owner`` file (:func:`claim_scratch_dir`),
which the system drops however its process dies; :func:`remove_leftovers` takes that lock
before it decides, so a folder in use is never touched. The staging dir may be a folder of the
user's with other things in it: only the exact names tileauto makes are looked at, and a
scratch folder only when its ``.owner`` holds tileauto's claim record for the pid in its name;
nothing is ever created or written in a folder to judge it. The rules: ``docs/cache_format.md``
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
MARK = "scratch"  # the claim record's "tileauto" field: this folder is tileauto's
_CLAIM_TRIES = 8
_HEX = "[0-9a-f]{12}"  # uuid4().hex[:12], as every name below is made
# The names tileauto makes in the staging dir, exactly; anything else there is left alone.
# claim_scratch_dir: <kind>-<pid>-<hex>
_SCRATCH = re.compile(rf"^(?P<kind>tune|proc|work|run)-(?P<pid>[1-9][0-9]*)-{_HEX}$")
_STAGE = re.compile(rf"^stage-{_HEX}$")  # disk.stage_dir: a folder; short writes, age rule
_PROBE = re.compile(r"^\.probe-[a-z0-9_]{8}$")  # locks.writable_staging's mkstemp: a file
_TRASH = re.compile(rf"^\.trash-{_HEX}$")  # a delete in progress or interrupted: no reader
_PROBE_MAX = 4096  # what writable_staging writes in its probe
_LEGACY_RECORD = frozenset(("pid", "host", "time"))  # claims made before the mark was added
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
        try:
            trash = disk.to_trash(self.path)
        except OSError:
            trash = self.path
        disk.discard(trash)
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

    Before it, the folders of the same kind whose process has ended, and interrupted deletes
    (``.trash-*``), are removed (:func:`remove_leftovers`): a run killed in its clean-up (Ctrl-C
    pressed twice) leaves them to the next run of its kind, not to ``tileauto cache clear``.

    Raises:
        UnsafeDirError: ``parent`` is not this user's own (see ``folders.make_private_dir``).
        OSError: the folder cannot be created.
    """
    folders.make_private_dir(Path(parent))
    _remove_ended(Path(parent), prefix)
    record = json.dumps(
        {"tileauto": MARK, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
    )
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


def _remove_ended(parent: Path, kind: str) -> None:
    """The scratch folders of ``kind`` in ``parent`` whose process ended, and interrupted
    deletes; a kind tileauto does not name is left alone."""
    if not _SCRATCH.match(f"{kind}-1-{'0' * 12}"):
        return
    done = remove_leftovers(parent, only=kind, with_trash=True)
    if done.removed:
        log.info(
            "removed %d leftovers of ended processes (%.1f MB) from %s",
            len(done.removed),
            done.size_bytes / 1e6,
            parent,
        )


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
    staging: Path,
    *,
    dry_run: bool = False,
    now: float | None = None,
    only: str | None = None,
    with_trash: bool = False,
) -> Cleanup:
    """Remove what killed runs left in the staging dir ``staging``; keep what is in use.

    Scratch folders (``tune-<pid>-<hex>``, ``proc-*``, ``run-*``, a worker's temp folder
    ``work-*``) go when no process holds their claim and their ``.owner`` holds tileauto's
    claim record for that pid (see the module's docstring); interrupted writes (folders
    ``stage-<hex>``, files ``.probe-<8 chars>``) once older than ``disk.STALE_S``; interrupted
    deletes (``.trash-<hex>``) at once (``<hex>``: 12 hex digits). Other names, and scratch
    names without tileauto's claim record, are never touched, nor written to: the staging dir
    may be a folder of yours with other things in it. ``dry_run`` decides the same way and
    removes nothing; ``only`` (such as ``"work"``) looks at the scratch folders of that kind
    alone (and, ``with_trash``, at the interrupted deletes).
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
            if not (with_trash and _TRASH.match(name)):
                continue
        item: Leftover | bool
        if scratch and stat.S_ISDIR(st.st_mode):
            item = _scratch_leftover(child, int(scratch.group("pid")), now, dry_run)
        elif _TRASH.match(name):
            item = Leftover(child, disk.dir_size(child), "an interrupted delete")
            if not dry_run:
                with contextlib.suppress(OSError):
                    disk.discard(child)
        elif _interrupted_write(name, st) and now - st.st_mtime >= disk.STALE_S:
            age = _age_text(now - st.st_mtime)
            item = Leftover(child, disk.dir_size(child), f"an interrupted write, {age} old")
            if not dry_run:
                with contextlib.suppress(OSError):
                    disk.discard(child)
        else:
            continue
        if item is True:
            in_use.append(child)
        elif isinstance(item, Leftover):
            removed.append(item)
    return Cleanup(tuple(removed), tuple(in_use))


def _interrupted_write(name: str, st: os.stat_result) -> bool:
    """Whether ``name`` is what an interrupted write of tileauto leaves: a ``stage-<hex>``
    folder, or a ``.probe-*`` file of the size written there."""
    if _STAGE.match(name):
        return stat.S_ISDIR(st.st_mode)
    if _PROBE.match(name):
        return stat.S_ISREG(st.st_mode) and st.st_size <= _PROBE_MAX
    return False


def _scratch_leftover(path: Path, pid: int, now: float, dry_run: bool) -> Leftover | bool:
    """Decide about one folder named as a scratch folder of ``pid``; remove it unless ``dry_run``.

    Returns the leftover removed, True when the folder is in use, False when it is not
    tileauto's to judge: no ``.owner`` that holds tileauto's claim record for ``pid`` (a
    folder of the user's, or one being made). Nothing is created or written in the folder.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # RDWR: flock over NFS
    try:
        fd = os.open(path / OWNER, flags)
    except OSError:
        return False  # none, a link, or not ours to open: not a claimed folder
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return False
        claim = _read_claim(fd)
        if claim is None or not _made_by_tileauto(claim, pid):
            return False
        locked = _lock(fd, blocking=False)
        if locked is False:
            return True  # claimed by a running process
        if locked:
            why: str | None = f"its process (pid {pid}) has ended"
        else:  # no flock on this file system: go by age and process id
            why = _unclaimed_leftover(claim, pid, disk.newest_mtime(path), now)
        if why is None:
            return True
        size = disk.dir_size(path)
        trash = None
        if not dry_run:
            try:
                trash = disk.to_trash(path)  # under the lock: a claimant waiting for it sees it go
            except OSError:
                return True
    finally:
        os.close(fd)
    if trash is not None:
        with contextlib.suppress(OSError):
            disk.discard(trash)
    return Leftover(path, size, why)


def _read_claim(fd: int) -> dict[str, Any] | None:
    """The claim record in ``.owner`` (None: empty, not JSON, or not a record)."""
    try:
        data = os.pread(fd, 4096, 0)
    except OSError:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _made_by_tileauto(claim: dict[str, Any], pid: int) -> bool:
    """Whether ``claim`` is the record :func:`claim_scratch_dir` wrote for process ``pid``:
    tileauto's mark (or, from before the mark, exactly its fields) and that pid."""
    claimed = claim.get("pid")
    if type(claimed) is not int or claimed != pid:
        return False
    return claim.get("tileauto") == MARK or set(claim) == _LEGACY_RECORD


def _unclaimed_leftover(claim: dict[str, Any], pid: int, newest: float, now: float) -> str | None:
    """Why a claimed folder with no lock to go by, last changed at ``newest``, is a leftover
    (None: it may still be in use)."""
    if now - newest < disk.STALE_S:
        return None
    if claim.get("host") != socket.gethostname():
        return None  # its process id says nothing on this machine
    if process_running_since(pid, newest):
        return None
    return f"unchanged for {_age_text(now - newest)}, its process (pid {pid}) has ended"


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
