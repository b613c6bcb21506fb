"""Locks between processes, and where a run stages when the cache folder cannot be used.

A key's lock is an ``flock`` on ``.locks/<kind>-<key>.lock`` (the OS releases it when its holder
dies); an unusable ``.locks`` falls back to a private folder of this user's, so concurrent
tuners still exclude each other. A read-only or full cache folder never stops a tuning: it
stages in the system's temporary folder instead (:func:`writable_staging`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.cache import disk, folders
from tileauto.utils.tmp import shared_tempdir

log = get_logger("cache")


@contextlib.contextmanager
def key_lock(
    lock_dir: Path, name: str, on_wait: Callable[[], None] | None = None, *, wait: bool = True
) -> Iterator[bool]:
    """Hold the inter-process lock ``name`` (the OS releases it if the holder dies); yields
    True. With ``wait=False``, where another process holds it, yields False at once, holding
    nothing.

    ``on_wait`` is called once when another process holds the lock, before waiting for it.

    Raises:
        OSError: the lock file cannot be created (read-only cache directory).
    """
    from filelock import FileLock, Timeout

    folders.make_private_dir(lock_dir)
    lock = FileLock(str(Path(lock_dir) / f"{name}.lock"), mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            yield False
            return
        if on_wait is not None:
            on_wait()
        lock.acquire()
    try:
        yield True
    finally:
        lock.release()


@contextlib.contextmanager
def best_effort_lock(
    lock_dir: Path, name: str, on_wait: Callable[[], None] | None = None, *, wait: bool = True
) -> Iterator[bool]:
    """:func:`key_lock`, in a private fallback folder where ``lock_dir`` cannot be used; yields
    whether this process holds it (False only with ``wait=False``; True where no lock can be
    taken at all: the caller goes on as if it held it).

    An unusable ``.locks`` (a file, foreign-owned, writable by others, not writable) is warned
    about once per process, and the lock is taken in ``<tmp>/tileauto-<uid>/locks``, which
    this user's processes share, so concurrent tuners still exclude each other. A cache that
    is read-only or full as a whole is not warned about here: its save warns, once.
    """
    try:
        lock = key_lock(lock_dir, name, on_wait, wait=wait)
        held = lock.__enter__()
    except OSError as exc:
        if _whole_cache_unwritable(exc, Path(lock_dir)):
            log.info("cannot lock %s in %s (%s); locking in a private folder", name, lock_dir, exc)
        else:
            disk.warn_once(
                f"cannot lock in {lock_dir} ({exc}); locking in a private folder instead "
                "(remove or fix that folder: it should be a folder of yours, mode 700)"
            )
        try:
            lock = key_lock(folders.private_fallback_dir("locks"), name, on_wait, wait=wait)
            held = lock.__enter__()
        except OSError as again:
            log.info("cannot lock %s in the fallback either (%s); going on without", name, again)
            yield True
            return
    try:
        yield held
    finally:
        lock.__exit__(None, None, None)


def _whole_cache_unwritable(exc: OSError, lock_dir: Path) -> bool:
    """Whether a lock failure is the cache's as a whole (read-only, full), not ``.locks``'s."""
    if isinstance(exc, folders.UnsafeDirError) and str(lock_dir) not in str(exc):
        return True  # the cache root itself is refused: the save says so
    if exc.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT):
        return True
    return exc.errno == errno.EACCES and not os.access(lock_dir.parent, os.W_OK)


def fallback_staging_dir() -> Path:
    """Where runs stage when the cache's staging dir cannot be used.

    ``<tmp>/tileauto-<uid>/staging``, shared by this user's processes: each run claims its own
    folder in it and removes it, so no process leaves a folder of its own in the temp dir. If
    that name is someone else's, one private temp folder per process, removed at exit.
    """
    try:
        return folders.make_private_dir(
            Path(shared_tempdir()) / f"tileauto-{os.getuid()}" / "staging"
        )
    except OSError:
        return _private_staging_dir()


@functools.cache
def _private_staging_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="tileauto-staging-", dir=shared_tempdir()))
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:  # a forked worker inherits the handler: not its folder
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return path


def writable_staging(settings: Any) -> Any:
    """``settings``, with staging moved to :func:`fallback_staging_dir` if its own cannot be used.

    A read-only or full cache directory must not stop tuning: the kernel is built in a temp
    folder and returned, and the cache write that follows fails with a warning. A staging
    folder another user could write (foreign-owned, writable by group or others) is refused
    with a warning of its own: kernels staged there could be swapped before they are cached.
    """
    staging = settings.staging_dir
    try:
        folders.make_private_dir(staging)
        with disk.probe_file(staging) as fd:  # removed by a SIGTERM too, once created
            os.write(fd, b"\0" * 4096)  # an empty file fits on a full disk; a kernel does not
        return settings
    except OSError as exc:
        fallback = fallback_staging_dir()
        if isinstance(exc, folders.UnsafeDirError):
            disk.warn_once(f"{exc.strerror}; staging in {fallback} instead")
        else:  # not warned: the cache write that follows fails and says so, once
            log.info("%s is not writable (%s); staging in %s instead", staging, exc, fallback)
        return dataclasses.replace(settings, tmp_dir=fallback)
