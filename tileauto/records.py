"""Plain records of a tuning run: statuses, latency statistics and trials (JSON round-trip).

No torch, no TVM: these are read by the cache and the command line without heavy imports.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from tileauto.artifact import KernelArtifact


class TrialStatus(enum.Enum):
    """Where a config ended up. Only OK trials carry a latency."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    COMPILE_CRASH = "compile_crash"
    MISMATCH = "mismatch"
    OUT_OF_BOUNDS = "out_of_bounds"
    RUN_ERROR = "run_error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    COMPILE_OUT_OF_MEMORY = "compile_out_of_memory"  # the compiler was killed for memory
    # the run was interrupted before this config finished, or its worker was stopped from
    # outside (SIGTERM, SIGINT, SIGHUP, SIGQUIT): not the config's doing
    CANCELLED = "cancelled"
    NOT_RUN = "not_run"

    @property
    def ok(self) -> bool:
        return self is TrialStatus.OK


# by stored value, without the enum's call (a cache hit of a big list reads 10^5 trials)
_STATUS: dict[str, TrialStatus] = {s.value: s for s in TrialStatus}


class Validation(enum.Enum):
    """What a config's outputs were checked against (TileLang's trial observer tells the same)."""

    REFERENCE = "reference"  # the user's ref_prog (its outputs, or its verdict)
    DEFAULT = "default"  # the default config's outputs (tolerances, or manual_check_prog)
    SKIPPED = "skipped"  # nothing: skip_check, the reference itself, or no reference outputs

    @classmethod
    def from_json(cls, value: Any) -> Validation | None:
        """The member named by a stored value (None: not validated, or an older record)."""
        if value is None:
            return None
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(v.value for v in cls)
            raise ValueError(
                f"a trial's 'validation' must be one of {choices} or null, got {value!r}"
            ) from None


# the start of the note on a trial whose threads waited for a CPU during much of its timing
# (see ``tileauto.run._busy``): its latency measured the machine's load too
BUSY_NOTE = "timed on a busy machine"
# the start of the note on a trial whose outputs had no reference of their shape (the default
# config ran with other buffers): it was only checked for unwritten outputs
NOT_COMPARED_NOTE = "not compared with the default config"


@dataclass(frozen=True)
class LatencyStats:
    """Latency samples summarized, in milliseconds."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    mean_ms: float
    samples: int
    stdev_ms: float = 0.0  # sample standard deviation (0 for one sample; absent in old entries)

    @staticmethod
    def bad_sample(samples_ns: Sequence[int | float]) -> str | None:
        """Why these samples cannot be a latency (a timer's NaN, inf or negative time), or
        None."""
        for s in samples_ns:
            if not math.isfinite(s) or s < 0:
                kind = "negative" if math.isfinite(s) else "non-finite"
                return f"the timer returned a {kind} sample ({s!r} ns); a latency is >= 0"
        return None

    @classmethod
    def from_samples_ns(cls, samples_ns: Sequence[int | float]) -> LatencyStats:
        """Summarize per-iteration samples given in nanoseconds."""
        if not samples_ns:
            raise ValueError("no latency samples to summarize")
        bad = cls.bad_sample(samples_ns)
        if bad is not None:
            raise ValueError(bad)
        ms = sorted(float(s) / 1e6 for s in samples_ns)
        return cls(
            median_ms=statistics.median(ms),
            p20_ms=_quantile(ms, 0.2),
            p80_ms=_quantile(ms, 0.8),
            min_ms=ms[0],
            mean_ms=statistics.fmean(ms),
            samples=len(ms),
            stdev_ms=statistics.stdev(ms) if len(ms) > 1 else 0.0,
        )

    @property
    def margin_ms(self) -> float:
        """Half-width of the 95% confidence interval of the mean (normal approximation)."""
        return 1.96 * self.stdev_ms / self.samples**0.5 if self.samples > 1 else 0.0

    @property
    def spread_ms(self) -> float:
        """p80 - p20: how noisy the measurement was."""
        return self.p80_ms - self.p20_ms

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LatencyStats:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Trial:
    """One config's path through compile, validation and timing.

    Attributes:
        index: position in the config list (``-1`` for the default config when it is not in it).
        config: the tunable arguments.
        status: how it ended.
        latency: timing statistics (OK trials only).
        compile_s: seconds compiling (elaborate + TVM + export).
        run_s: seconds in the run worker (load, validate, time).
        error: why it failed, a few lines; None when OK.
        notes: remarks that are not failures (e.g. "writes into input 'x'").
        validation: what its outputs were checked against; None when it never ran (or in a
            record older than the field).
        cache_hit: True only on the marker an ``on_trial`` observer gets when a tuning is
            answered by a cache: the stored winner, not a measurement of this run.
    """

    index: int
    config: dict[str, Any]
    status: TrialStatus
    latency: LatencyStats | None = None
    compile_s: float | None = None
    run_s: float | None = None
    error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    validation: Validation | None = None
    cache_hit: bool = False

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK

    @property
    def latency_ms(self) -> float | None:
        return self.latency.median_ms if self.latency is not None else None

    @property
    def reason(self) -> str:
        """One line saying why the trial failed (or 'ok')."""
        if self.ok:
            return "ok"
        first = (self.error or "").strip().splitlines()
        return f"{self.status.value}: {first[0] if first else 'no message'}"

    def at_index(self, index: int) -> Trial:
        return self if index == self.index else replace(self, index=index)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "config": self.config,
            "status": self.status.value,
            "latency": self.latency.to_json() if self.latency else None,
            "compile_s": self.compile_s,
            "run_s": self.run_s,
            "error": self.error,
            "notes": list(self.notes),
            "validation": self.validation.value if self.validation is not None else None,
            "cache_hit": self.cache_hit,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        return cls(
            index=int(data["index"]),
            config=dict(data["config"]),
            status=_STATUS.get(data["status"]) or TrialStatus(data["status"]),
            latency=LatencyStats.from_json(data["latency"]) if data.get("latency") else None,
            compile_s=data.get("compile_s"),
            run_s=data.get("run_s"),
            error=data.get("error"),
            notes=tuple(data.get("notes", ())),
            validation=Validation.from_json(data.get("validation")),
            cache_hit=bool(data.get("cache_hit", False)),
        )


NEVER_TRIED = "never tried"  # the error of a NOT_RUN trial the search did not propose


def is_never_tried(trial: Trial) -> bool:
    """Whether a trial stands for a config the search never proposed (not a failure)."""
    return trial.status is TrialStatus.NOT_RUN and (trial.error or "").startswith(NEVER_TRIED)


# Failures that depend on the moment (load, memory, an interrupt), measured again next time;
# every other outcome of a config is reused from the cache.
TRANSIENT = frozenset(
    {
        TrialStatus.TIMEOUT,
        TrialStatus.OUT_OF_MEMORY,
        TrialStatus.COMPILE_OUT_OF_MEMORY,
        TrialStatus.CANCELLED,
        TrialStatus.NOT_RUN,
        TrialStatus.COMPILE_TIMEOUT,
    }
)


@dataclass(frozen=True)
class RunOutcome:
    """What running one built config gave: the run worker's answer, or a scripted one.

    ``reference`` (the default config's outputs, kept by the parent so that a replacement
    worker gets them without running the default again) is the worker's business; records
    read by the session are the status, the samples, the messages and ``reference_kept``.

    ``reference_kept``: whether the run worker held the default config's outputs as this
    run's reference when it checked it (no ``ref_prog``): for the default config's own run,
    that they were kept (False when they were incomplete, so none is); for another config,
    that it was compared with them (False: only checked for unwritten outputs). None when
    the runner did not say (a run that never reached the check, a scripted runner).

    ``iters``: the warm-up and timed calls the worker chose for the config (``rep`` in ms
    makes them a measurement), given back to whichever worker re-times it.
    """

    status: TrialStatus
    samples_ns: tuple[float, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = ()
    reference: Any = None
    reference_inplace: tuple[int, ...] | None = None
    run_s: float = 0.0
    reference_kept: bool | None = None
    iters: tuple[int, int] | None = None  # None: not timed


# -- builds ------------------------------------------------------------------------------------
class BuildStatus(enum.Enum):
    """How a compile ended."""

    OK = "ok"
    ERROR = "compile_error"
    TIMEOUT = "compile_timeout"
    CRASH = "compile_crash"  # the compiler itself crashed (a signal): permanent for the config
    OUT_OF_MEMORY = "compile_out_of_memory"  # killed for memory: may pass another time
    CANCELLED = "cancelled"  # stopped by Builder.cancel (an interrupt): never ran to its end


@dataclass(frozen=True)
class BuildRequest:
    """One config to compile: ``factory(*args, **kwargs)`` with the config merged into kwargs."""

    index: int
    config: dict[str, Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuildResult:
    """The outcome of one BuildRequest, at the same index."""

    index: int
    config: dict[str, Any]
    status: BuildStatus
    artifact: KernelArtifact | None = None  # a KernelArtifact, or a scripted stand-in
    error: str | None = None
    compile_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is BuildStatus.OK


@dataclass(frozen=True)
class SessionSummary:
    """How a tuning session ended, as its reporters get it (``Reporter.finished``).

    ``best`` is None when no config passed or the run was interrupted (``error`` says why);
    ``never_tried`` counts the configs of a large product that have no trial (None: a
    constrained product the search did not scan to its end, so the rest was not counted);
    ``pruned`` is the configs each constraint removed before compiling (in the part scanned). ``log_path`` is the trial log a
    reporter before this one wrote (set by the fan-out).
    """

    name: str
    trials: tuple[Trial, ...] = ()
    best: Trial | None = None
    default: Trial | None = None
    ref_latency_ms: float | None = None
    elapsed_s: float = 0.0
    stop_reason: str | None = None
    key: str | None = None
    error: str | None = None
    never_tried: int | None = 0
    pruned: dict[str, int] = field(default_factory=dict)
    log_path: Path | None = None
