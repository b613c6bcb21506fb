"""A machine made busy on purpose, for the tests of what tileauto does under load."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_SPIN = "import sys\nsys.stdout.write('x'); sys.stdout.flush()\nwhile True:\n    pass\n"


@contextmanager
def busy_machine(count: int | None = None) -> Iterator[None]:
    """``count`` busy processes (default: one per CPU), each runnable for certain (it says so
    before its loop starts) until the block ends; always killed."""
    busy = [
        subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE)
        for _ in range(count or os.cpu_count() or 1)
    ]
    try:
        for p in busy:
            assert p.stdout is not None and p.stdout.read(1) == b"x"
        yield
    finally:
        for p in busy:
            p.kill()
            p.wait()
