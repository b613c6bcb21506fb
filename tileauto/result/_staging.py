"""The staging folder of a save, beside its destination, and the leftovers of killed saves.

``save_to_disk(path)`` fills ``.<name>.stage-<host>.<pid>-<8 hex>`` next to ``path`` (the
rename into place must stay on one file system) and removes it once done, or when the process
ends meanwhile by a SIGTERM during a tuning or the exit after a Ctrl-C (it is registered with
the cache's deletes under way: :func:`tileauto.cache.disk.scratch_folder`). A save killed
otherwise (kill -9, a SIGTERM outside a tuning) cannot: the next save into the same folder
removes the staging folders of that exact pattern whose process is gone, and only this user's
and this machine's. One named
``.<name>.stage-<8 hex>`` (no pid: an older tileauto's) is removed once an hour old.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import stat
import time
import uuid
from pathlib import Path

from tileauto._logging import get_logger

log = get_logger("shipping")

#: an older tileauto's staging folder (no pid) is its dead writer's once this old
STALE_S = 3600.0


def new_staging(path: Path) -> Path:
    """The path of a new staging folder for a save to ``path`` (not created)."""
    return path.parent / f".{path.name}.stage-{_host()}.{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _host() -> str:
    """This machine, in 6 hex digits: a folder two machines share (NFS) holds the staging
    folders of both, and a pid says nothing about the other machine's processes."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


def sweep_staging(path: Path) -> int:
    """Remove the staging folders that saves to ``path`` killed before they were done left
    beside it (see the module); returns how many. Nothing else is looked at."""
    pattern = re.compile(
        rf"\.{re.escape(path.name)}\.stage-(?:([0-9a-f]{{6}})\.(\d+)-)?[0-9a-f]{{8}}"
    )
    try:
        names = os.listdir(path.parent)
    except OSError:  # no folder yet, or unreadable: the save says so
        return 0
    removed = 0
    for name in names:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        if match[1] is not None and match[1] != _host():  # another machine's: not ours to judge
            continue
        pid = int(match[2]) if match[2] is not None else None
        if _left_behind(path.parent / name, pid):
            shutil.rmtree(path.parent / name, ignore_errors=True)
            log.info("removed %s, the staging folder of a save that was killed", name)
            removed += 1
    return removed


def _left_behind(folder: Path, pid: int | None) -> bool:
    """Whether ``folder`` is this user's, a folder (no link), and its writer is gone: its
    process no longer runs (an older name without a pid: untouched for :data:`STALE_S`)."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    if pid is None:
        return time.time() - st.st_mtime > STALE_S
    return pid != os.getpid() and not _running(pid)


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (another user's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
