"""The stages a tuning session drives, as small protocols, with their optional capabilities.

A session owns the loop (what to measure next, what wins, what is stored); it is handed a
**builder** (compiles configs), a **runner** (checks and times them), a **store** (results and
measurements), a **search** strategy and a **reporter**, finished (:mod:`tileauto.tune.defaults`
makes them from the options). A capability only some stages have is a protocol of its own
here, so a stage says what it can do and the session asks by type, never by attribute name.
None of these imports torch or TVM: fakes of them are cheap to write and to import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from tileauto.artifact import KernelArtifact

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
    ) -> None:
        """Compile every request; call ``on_result`` (from any thread) as each one ends, once
        per request, cancelled ones included (:func:`tileauto.build.job.build_all` collects them
        in order, for a caller that wants the list)."""

    def cancel(self) -> None:
        """Stop this build now: no new compile starts and running ones are killed.

        Called from the session's thread while :meth:`build` runs on another one. It must
        touch only what this build owns (another session's compiles go on).
        """

    def close(self) -> None:
        """Release what the build holds (workers forked for it). Called once, at the end."""


@runtime_checkable
class RunStage(Protocol):
    """Checks and times built configs, isolated from the session's process."""

    def start(self) -> None:
        """Get ready before the session starts any thread (for example: fork the run worker)."""

    def prepare(self, artifact: KernelArtifact) -> None:
        """The first built config: make inputs and the reference (may work in the background)."""

    def run(
        self,
        artifact: KernelArtifact,
        config: dict[str, Any],
        *,
        is_reference: bool,
        time_it: bool = True,
    ) -> RunOutcome:
        """Check one config against the reference (``is_reference``: it *is* the reference)."""

    def retime(
        self, items: Sequence[tuple[KernelArtifact, dict[str, Any]]], rounds: int
    ) -> list[tuple[float, ...]] | RunOutcome | None:
        """Time configs again, interleaved; samples in ns per item, or None if it cannot.

        When a config crashed, hung or raised in it (the run worker died or timed out, or a
        kernel's call raised), the failure as a :class:`~tileauto.records.RunOutcome`
        (``crash``, ``timeout``, ``run_error``...); the session then re-times each config
        alone to find which one it was."""

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

    def save(self, result: AutotuneResult) -> str | None:
        """Store the result and its measured trials; the key it was stored under, or None
        (not stored). Trials whose status is in ``records.TRANSIENT`` are not stored."""


@runtime_checkable
class MultiSlotRunStage(RunStage, Protocol):
    """A runner with several device slots (Ray actors on several nodes or GPUs)."""

    def run_many(
        self, items: Sequence[tuple[KernelArtifact, dict[str, Any]]]
    ) -> Iterator[tuple[int, RunOutcome]]:
        """Check and time ``(artifact, config)`` pairs at once, yielding ``(position, outcome)``
        as each ends; the session records them in order."""


@runtime_checkable
class TrialStore(Store, Protocol):
    """A store that keeps each trial as soon as it is measured (an interrupted run keeps it)."""

    def save_trial(self, trial: Trial) -> None:
        """Store one trial. A trial whose status is in ``records.TRANSIENT`` (not run,
        cancelled, a timeout) never replaces one measured before. Never raises for a failed
        write (``save`` reports it)."""


@runtime_checkable
class NotingReporter(Reporter, Protocol):
    """A reporter that also takes one-line notes (a cache hit); others get them as log lines."""

    def note(self, message: str) -> None:
        """Tell the user ``message``."""


KernelLoader: TypeAlias = Callable[[KernelArtifact | None, dict[str, Any]], Any]
"""Makes the winner's callable kernel from its artifact, or compiles the config when an earlier
run measured it (the artifact is then None)."""


@runtime_checkable
class LoadingBuildStage(BuildStage, Protocol):
    """A builder that knows how to load what it built (a fake's kernels, say)."""

    def load_kernel(self, artifact: KernelArtifact | None, config: dict[str, Any]) -> Any:
        """The winner as a callable kernel (a :data:`KernelLoader`)."""


BuilderMaker: TypeAlias = Callable[[Path, int], BuildStage]
"""Makes the builder of a session that must tune (a cache hit makes none), given the scratch
folder that session claimed to compile into and the number of configs: how the default builders
are passed."""
