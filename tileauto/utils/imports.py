"""Heavy imports with Python's cyclic garbage collector paused.

Importing torch, TVM's compiler and tileauto in a fresh process creates hundreds of thousands
of objects, and the collector runs again and again while it does, scanning objects that all
stay alive: about 0.3 s of CPU of the 1.9-2.1 s such an import costs (measured, docs/scale.md).
tileauto pauses it around the imports it makes ahead of time in its own worker processes (the
forkserver's preload, a Ray compile worker's warm-up, a run actor's preload) and around the
first import of TVM in the tuning process. Nothing is lost: objects without cycles are freed
as always, and cycles made meanwhile are collected once the collector runs again.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, then as it was (left off when the
    caller had turned it off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
