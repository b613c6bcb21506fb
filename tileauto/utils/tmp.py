"""The temp folder this user's processes share, and a worker's own.

A worker process gets a temp folder of its own (``TMPDIR`` and :mod:`tempfile`), removed by its
parent when the worker ends, so a job killed half-way (a compile timed out while TVM exported
its object files, a ``g++`` writing its ``cc*.o``) leaves nothing in the system's temp folder.
What must be the same in every process of this user (the fallback lock and staging folders)
asks :func:`shared_tempdir` instead, which in a worker is still the system's.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["restore_tempdir", "shared_tempdir", "use_own_tempdir"]

_SHARED: str | None = None  # set in a worker: the temp folder before it took its own


def shared_tempdir() -> str:
    """The temp folder this user's processes share (:func:`tempfile.gettempdir`, except in a
    worker, whose own temp folder it is not)."""
    return _SHARED if _SHARED is not None else tempfile.gettempdir()


def use_own_tempdir(path: str) -> tuple[str | None, str | None]:
    """Make ``path`` this process's temp folder: :mod:`tempfile`'s and, through ``TMPDIR``,
    that of every program it starts. :func:`shared_tempdir` keeps the one before. Returns
    what :func:`restore_tempdir` needs to undo it."""
    global _SHARED
    if _SHARED is None:
        _SHARED = tempfile.gettempdir()
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = path
    tempfile.tempdir = path
    return before


def restore_tempdir(before: tuple[str | None, str | None]) -> None:
    """Undo :func:`use_own_tempdir` (``before`` is what it returned)."""
    env, tempdir = before
    if env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = env
    tempfile.tempdir = tempdir
