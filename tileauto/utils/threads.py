"""Threads that leave SIGINT and SIGTERM to the main thread, the one that handles them."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_MAIN_THREAD_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def signals_to_main_thread() -> Iterator[None]:
    """While inside, this thread (unless it is the main one) blocks SIGINT and SIGTERM.

    Python runs signal handlers in the main thread only, but the kernel may deliver a
    process-wide signal to any thread that does not block it; when another thread takes a
    Ctrl-C, a main thread asleep in a lock wait (``queue.get()``, ``Thread.join()``) is not
    woken, and the ``KeyboardInterrupt`` waits for whatever wakes it next (measured: a tuning
    interrupted while compiling hung in one try of five, until its compiles ended). Blocked
    here, the signal goes to a thread that can handle it.
    """
    if threading.current_thread() is threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _MAIN_THREAD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def background_thread(target: Callable[..., Any], *args: Any, name: str) -> threading.Thread:
    """Start a daemon thread running ``target(*args)`` that leaves SIGINT and SIGTERM to the
    main thread (see :func:`signals_to_main_thread`); an exit never waits for it. Every
    thread tileauto starts should be one of these.
    """

    def run() -> None:
        with signals_to_main_thread():
            target(*args)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
