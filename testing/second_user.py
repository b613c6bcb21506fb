"""A second user of this machine, for the tests of a cache that another user must not touch."""

from __future__ import annotations

import os

import pytest

OTHER_UID = 12345  # an unused uid: the "second user"
needs_root = pytest.mark.skipif(
    os.getuid() != 0, reason="acting as a second user (chown, setuid) needs this process to be root"
)


def as_second_user(action) -> int:
    """Run ``action()`` in a forked child as uid/gid ``OTHER_UID``; returns its exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            code = int(action() or 0)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
