"""The stages a :class:`~tileauto.tune.session.TuningSession` is assembled from, as small protocols.

A session owns the loop (what to measure next, what wins, what is stored) and nothing else:

* a **builder** compiles configs (today: :class:`tileauto.build.builder.Builder`, a pool of killable
  worker processes; tomorrow also a builder on a remote engine);
* a **runner** checks and times built configs (today: :class:`tileauto.run.runner.Runner`, one
  isolated run worker; in tests and replays: :class:`tileauto.testing.ScriptedRunner`);
* a **store** remembers results and per-config measurements (the disk cache,
  :class:`tileauto.tune.stores.DiskStore`, or :class:`tileauto.tune.stores.MemoryStore`);
* a **search** strategy says which configs to measure (``tileauto.search``);
* a **reporter** tells the user (progress, the table, the streaming trial log); its protocol
  is :class:`tileauto.report.console.Reporter`.

Every method here is called from the session's thread unless it says otherwise. None of these
imports torch or TVM, so fakes of them are cheap to write and to import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

# the reporter protocol lives with the reporters; the session sees it here with the others
from tileauto.report.console import Reporter as Reporter

if TYPE_CHECKING:
    from tileauto.records import BuildRequest, BuildResult, RunOutcome, Trial
    from tileauto.result.record import AutotuneResult


@runtime_checkable
class BuildStage(Protocol):
    """Compiles configs in parallel; a failure is a result with a status, never an exception."""

    @property
    def workers(self) -> int:
        """How many configs it compiles at once (the session sizes its batches by it)."""

    def start(self) -> None:
        """Get ready before the session starts any thread (for example: fork the workers)."""

    def build(
        self, requests: Sequence[BuildRequest], on_result: Callable[[BuildResult], None]
    ) -> object:
        """Compile every request; call ``on_result`` (from any thread) as each one ends.

        What it returns is not used (the local builder returns the results in order too).
        """

    def cancel(self) -> None:
        """Stop this build now: no new compile starts and running ones are killed.

        Called from the session's thread while :meth:`build` runs on another one. It must
        touch only what this build owns (another session's compiles go on).
        """

    def close(self) -> None:
        """Release what the build holds (workers forked for it). Called once, at the end."""


@runtime_checkable
class RunStage(Protocol):
    """Checks and times built configs, isolated from the session's process.

    A run stage with several device slots (Ray actors on several nodes or GPUs) may also have
    ``run_many(items) -> Iterator[(position, RunOutcome)]``, where ``items`` are
    ``(artifact, config)`` pairs, yielded as each ends; the session then runs the configs
    after the default through it, in parallel, and records them in order.
    """

    def start(self) -> None:
        """Get ready before the session starts any thread (for example: fork the run worker)."""

    def prepare(self, artifact: Any) -> None:
        """The first built config: make inputs and the reference (may work in the background)."""

    def run(
        self, artifact: Any, config: dict[str, Any], *, is_reference: bool, time_it: bool = True
    ) -> RunOutcome:
        """Check one config against the reference (``is_reference``: it *is* the reference)."""

    def retime(
        self, items: Sequence[tuple[Any, dict[str, Any]]], rounds: int
    ) -> list[tuple[float, ...]] | None:
        """Time configs again, interleaved; samples in ns per item, or None if it cannot."""

    def time_reference(self) -> float | None:
        """The reference program's latency in ms (informative only), or None."""

    def close(self) -> None:
        """Stop the run worker (gracefully; :meth:`kill` when interrupted)."""

    def kill(self) -> None:
        """Stop now: kill the run worker and everything it started."""


@runtime_checkable
class Store(Protocol):
    """Where results and measurements live: one tuning problem's entry."""

    key: str

    def load(self) -> AutotuneResult | None:
        """The stored result, ready to use, or None (a bad entry is a miss)."""

    def known_trials(self) -> dict[str, Trial]:
        """Trials measured before, by config id, that need not be measured again."""

    def locked(self) -> AbstractContextManager[None]:
        """Hold this problem's lock: concurrent sessions of one problem tune it once."""

    def save_trial(self, trial: Trial) -> None:
        """Store one trial as soon as it is measured, so that an interrupted run keeps it.

        Optional (a store without it keeps trials at :meth:`save` only). A trial whose status
        is in ``records.TRANSIENT`` (not run, cancelled, a timeout) must never replace one
        measured before. Must not raise for a failed write (``save`` reports it).
        """

    def save(self, result: AutotuneResult) -> str | None:
        """Store the result and its measured trials; the key it was stored under, or None
        (not stored). Trials whose status is in ``records.TRANSIENT`` are not stored."""
