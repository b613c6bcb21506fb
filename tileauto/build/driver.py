"""The build loop every build stage runs: requests handed to slots, one result each.

A stage brings its slots (a leased compile worker, a thread, a Ray task at a time); each slot
compiles the requests it takes until none is left. :func:`drive` keeps the first result of
each request, calls ``on_result`` as each ends, and returns as soon as every slot ended or
the build was cancelled, with every request not finished ``CANCELLED``: it never waits for a
compile it gave up on.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tileauto._logging import get_logger
from tileauto.build.job import failed
from tileauto.records import BuildRequest, BuildResult, BuildStatus
from tileauto.utils.threads import background_thread

log = get_logger("builder")

WAKE_S = 0.1  # a waiting build looks at its interrupts, cancel and deadlines this often


class Slot(Protocol):
    """One compile at a time, on the slot's own thread."""

    def compile(self, request: BuildRequest, out_dir: str) -> BuildResult:
        """Compile ``request`` into ``out_dir``; a failure is a result, never an exception
        (an exception ends the build: :func:`drive` raises it)."""
        ...

    def release(self) -> None:
        """Give back what the slot holds (its worker); called once, on its thread, as it ends."""
        ...


def drive(
    requests: Sequence[BuildRequest],
    slots: Sequence[Slot],
    batch_dir: Path,
    cancelled: threading.Event,
    on_result: Callable[[BuildResult], None] | None = None,
    *,
    changed: threading.Condition | None = None,
    name: str = "tileauto-build",
) -> list[BuildResult]:
    """Compile ``requests`` on ``slots`` (a thread each); results index-aligned.

    Returns once every slot ended or ``cancelled`` is set. A slot's exception (``on_result``'s
    included) is raised here once every slot stopped taking requests; the caller cancels what
    is still in flight (on an interrupt too). ``changed``, notified, wakes the wait at once
    (a cancel does).
    """
    run = _Run(requests, on_result, batch_dir, changed or threading.Condition())
    run.slots = len(slots)
    started = 0
    try:
        for slot in slots:
            # daemon threads: an exit never waits for a compile, and Ctrl-C stays the main one's
            background_thread(_slot_loop, run, slot, cancelled, name=f"{name}-{started}")
            started += 1
        run.wait(cancelled)
    finally:
        for slot in slots[started:]:  # their threads never started
            slot.release()
    if run.errors:
        raise run.errors[0]
    for i, request in enumerate(requests):
        run.finish(i, failed(request, BuildStatus.CANCELLED, "cancelled before it finished"))
    return run.results()


def _slot_loop(run: _Run, slot: Slot, cancelled: threading.Event) -> None:
    """One slot: takes requests until none is left, the build is cancelled or one failed."""
    try:
        while not cancelled.is_set() and not run.errors:
            i = run.next_index()
            if i is None:
                return
            run.finish(i, slot.compile(run.requests[i], str(run.batch_dir / f"{i:04d}")))
    except BaseException as exc:  # noqa: BLE001 - raised by drive(), on the caller's thread
        with run.changed:
            run.errors.append(exc)
    finally:
        slot.release()
        run.slot_ended()


class _Run:
    """One call of :func:`drive`: its requests, results and slots."""

    def __init__(
        self,
        requests: Sequence[BuildRequest],
        on_result: Callable[[BuildResult], None] | None,
        batch_dir: Path,
        changed: threading.Condition,
    ) -> None:
        self.requests = requests
        self.on_result = on_result
        self.batch_dir = batch_dir
        self.changed = changed
        self.slots = 0
        self.errors: list[BaseException] = []
        self._results: list[BuildResult | None] = [None] * len(requests)
        self._next = 0

    def next_index(self) -> int | None:
        with self.changed:
            if self._next >= len(self.requests):
                return None
            self._next += 1
            return self._next - 1

    def finish(self, i: int, result: BuildResult) -> None:
        """Keep the first result of request ``i`` (a cancel may have given up on it first)."""
        with self.changed:
            if self._results[i] is not None:
                return
            self._results[i] = result
        if self.on_result is not None:
            self.on_result(result)

    def slot_ended(self) -> None:
        with self.changed:
            self.slots -= 1
            self.changed.notify_all()

    def wait(self, cancelled: threading.Event) -> None:
        """Until every slot ended, one failed or the build is cancelled (a Ctrl-C delivered
        to another thread is still handled within ``WAKE_S``)."""
        with self.changed:
            while self.slots > 0 and not cancelled.is_set() and not self.errors:
                self.changed.wait(WAKE_S)

    def results(self) -> list[BuildResult]:
        with self.changed:
            return [r for r in self._results if r is not None]


class SlotStage:
    """What a build stage that runs :func:`drive` keeps: its cancel switch, the builds that a
    cancel wakes, and its staging folder (a builder subclasses it and sets these three)."""

    staging_dir: Path
    factory: Callable[..., Any]
    compile_args: Any  # CompileArgs: its verbose logs each compile
    _cancelled: threading.Event
    _lock: threading.Lock
    _waiting: set[threading.Condition]

    def cancel(self) -> None:  # pragma: no cover - each stage says what it stops
        raise NotImplementedError

    def _drive(
        self,
        requests: Sequence[BuildRequest],
        slots: Sequence[Slot],
        on_result: Callable[[BuildResult], None] | None,
        name: str = "tileauto-build",
    ) -> list[BuildResult]:
        """:func:`drive` in a batch folder of its own, woken by a cancel; an interrupt or a
        failed ``on_result`` cancels this stage's compiles, then raises."""
        changed = threading.Condition()
        with self._lock:
            self._waiting.add(changed)
        try:
            batch = self.staging_dir / f"build-{uuid.uuid4().hex[:12]}"
            return drive(
                requests,
                slots,
                batch,
                self._cancelled,
                self._logged(on_result),
                changed=changed,
                name=name,
            )
        except BaseException:
            self.cancel()
            raise
        finally:
            with self._lock:
                self._waiting.discard(changed)

    def _logged(
        self, on_result: Callable[[BuildResult], None] | None
    ) -> Callable[[BuildResult], None] | None:
        """``on_result``, each result logged first when ``verbose`` is on (in the tuning's
        process, whichever worker or Ray node compiled it)."""
        if not getattr(self.compile_args, "verbose", False):
            return on_result
        name = getattr(self.factory, "__name__", "kernel")

        def logged(result: BuildResult) -> None:
            log.warning(
                "compiled %s config %s in %.3f s: %s",
                name,
                result.config,
                result.compile_s,
                result.status.value,
            )
            if on_result is not None:
                on_result(result)

        return logged

    def _wake_builds(self) -> None:
        """Wake every build of this stage now (after a cancel)."""
        with self._lock:
            waiting = list(self._waiting)
        for cond in waiting:
            with cond:
                cond.notify_all()
