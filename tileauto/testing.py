"""Stages that compile and run nothing, for testing a tuning session (yours or ours).

A :class:`~tileauto.tune.session.TuningSession` given a :class:`ScriptedBuilder`, a
:class:`ScriptedRunner` and a :class:`~tileauto.tune.stores.MemoryStore` runs its whole loop (the
default first, the search, re-timing, the pick, the save, the report) in milliseconds, with
outcomes you choose per config::

    from tileauto.tune.problem import TuningProblem
    from tileauto.tune.session import TuningSession
    from tileauto.tune.stores import MemoryStore
    from tileauto.testing import ScriptedBuilder, ScriptedRunner

    def factory(n, block=32): ...

    latency = {16: 2.0, 32: 1.0, 64: "mismatch"}
    session = TuningSession(
        problem,
        builder=ScriptedBuilder(fails=lambda c: "compile_error" if c["block"] == 128 else None),
        runner=ScriptedRunner(lambda c: latency[c["block"]]),
        store=MemoryStore("gemm"),
    )
    result = session.run()   # result.config == {"block": 32}

A script returns, per config, a latency in milliseconds (a number), a status name of
:class:`~tileauto.records.TrialStatus` (``"mismatch"``, ``"crash"``, ``"timeout"``...), or a
``(status, message)`` pair. Scripts may raise to simulate a broken stage.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto.records import (
    BuildRequest,
    BuildResult,
    BuildStatus,
    RunOutcome,
    SessionSummary,
    Trial,
    TrialStatus,
)

Script = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class ScriptedArtifact:
    """What a :class:`ScriptedBuilder` "builds": the config, on a device."""

    config: dict[str, Any]
    device_type: str = "cpu"
    params: tuple = ()
    out_idx: tuple[int, ...] = ()
    directory: Path = Path(".")


@dataclass(frozen=True)
class ScriptedKernel:
    """The winner of a scripted session: calling it returns its config."""

    config: dict[str, Any]

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(self.config)


@dataclass
class ScriptedBuilder:
    """A builder that compiles nothing: every config builds, unless ``fails`` says otherwise.

    Args:
        fails: ``fails(config)`` returns None (it builds), or a build status name
            (``"compile_error"``, ``"compile_timeout"``, ``"compile_crash"``...), or a
            ``(status, message)`` pair.
        workers: how many configs it claims to build at once.
        device_type: the device of what it builds (``"cuda"`` runs configs as they arrive).
        compile_s: the compile time each build reports.

    Attributes:
        built: every config it was asked to build, in order.
        cancelled: whether :meth:`cancel` was called.
    """

    fails: Script | None = None
    workers: int = 2
    device_type: str = "cpu"
    compile_s: float = 0.01
    built: list[dict[str, Any]] = field(default_factory=list)
    cancelled: bool = False
    started: bool = False
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> None:
        self.started = True

    def build(
        self, requests: Sequence[BuildRequest], on_result: Callable[[BuildResult], None]
    ) -> None:
        for request in requests:
            if self.cancelled:
                return
            with self._lock:
                self.built.append(dict(request.config))
            on_result(self._one(request))

    def _one(self, request: BuildRequest) -> BuildResult:
        got = self.fails(dict(request.config)) if self.fails is not None else None
        if got is None:
            # stands in for a KernelArtifact: the session reads only its device_type
            artifact: Any = ScriptedArtifact(dict(request.config), self.device_type)
            return BuildResult(
                request.index, request.config, BuildStatus.OK, artifact, compile_s=self.compile_s
            )
        status, message = got if isinstance(got, tuple) else (got, f"scripted {got}")
        return BuildResult(
            request.index,
            request.config,
            BuildStatus(status),
            error=message,
            compile_s=self.compile_s,
        )

    def cancel(self) -> None:
        self.cancelled = True

    def close(self) -> None:
        self.closed = True

    def load_kernel(self, artifact: Any, config: dict[str, Any]) -> ScriptedKernel:
        """The winner as a callable (it returns its config)."""
        return ScriptedKernel(dict(config))


@dataclass
class ScriptedRunner:
    """A runner that runs nothing: each config's latency or failure comes from ``script``.

    Args:
        script: ``script(config)`` returns a latency in ms, a status name, or a
            ``(status, message)`` pair (see the module's docs).
        samples: how many samples each timing reports (all equal to the latency, or spread
            by ``jitter`` (a fraction) around it, deterministically).
        retime: a script for the interleaved re-timing (default: ``script`` again); return
            None to say the runner could not re-time.
        ref_latency_ms: what :meth:`time_reference` reports.

    Attributes:
        runs: every config run, in order (``(config, is_reference)``).
    """

    script: Script
    samples: int = 5
    jitter: float = 0.0
    retime_script: Script | None = None
    ref_latency_ms: float | None = None
    runs: list[tuple[dict[str, Any], bool]] = field(default_factory=list)
    prepared: Any = None
    killed: bool = False
    closed: bool = False

    def start(self) -> None:
        pass

    def prepare(self, artifact: Any) -> None:
        self.prepared = artifact

    def run(
        self, artifact: Any, config: dict[str, Any], *, is_reference: bool, time_it: bool = True
    ) -> RunOutcome:
        self.runs.append((dict(config), is_reference))
        return self._outcome(self.script(dict(config)), time_it)

    def _outcome(self, got: Any, time_it: bool = True) -> RunOutcome:
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            if not time_it:
                return RunOutcome(TrialStatus.OK, run_s=0.001)
            return RunOutcome(TrialStatus.OK, self._samples(float(got)), run_s=0.001)
        status, message = got if isinstance(got, tuple) else (got, f"scripted {got}")
        return RunOutcome(TrialStatus(status), error=message, run_s=0.001)

    def _samples(self, ms: float) -> tuple[float, ...]:
        n = max(1, self.samples)
        steps = [(k - (n - 1) / 2) / max(1, n - 1) for k in range(n)]  # -0.5 .. 0.5
        return tuple(ms * 1e6 * (1 + self.jitter * s) for s in steps)

    def retime(
        self, items: Sequence[tuple[Any, dict[str, Any]]], rounds: int
    ) -> list[tuple[float, ...]] | None:
        script = self.retime_script or self.script
        out = []
        for _, config in items:
            got = script(dict(config))
            if got is None:
                return None
            out.append(self._samples(float(got)) if isinstance(got, (int, float)) else ())
        return out

    def time_reference(self) -> float | None:
        return self.ref_latency_ms

    def close(self) -> None:
        self.closed = True

    def kill(self) -> None:
        self.killed = True


@dataclass
class RecordingReporter:
    """A reporter that keeps every call (for asserting what a session reported)."""

    events: list[tuple[str, Any]] = field(default_factory=list)

    def started(self, name: str, configs: int) -> None:
        self.events.append(("started", (name, configs)))

    def steps(self, total: int) -> None:
        self.events.append(("steps", total))

    def step(self) -> None:
        self.events.append(("step", None))

    def trial(self, trial: Trial) -> None:
        self.events.append(("trial", trial))

    def note(self, message: str) -> None:
        self.events.append(("note", message))

    def finished(self, summary: SessionSummary) -> Path | None:
        self.events.append(("finished", summary))
        return None

    def of(self, kind: str) -> list[Any]:
        """The payloads of every event of ``kind``."""
        return [payload for k, payload in self.events if k == kind]
