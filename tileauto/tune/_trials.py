"""A trial made from what the builder and the runner returned, and what it was checked against.

The session records one :class:`~tileauto.records.Trial` per config; these functions restate
the stages' outcomes in the trial's terms (a build status as a trial status, the run worker's
validation rules) and warn when the timings were taken on a busy machine.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from tileauto._logging import get_logger
from tileauto.options import ProfileArgs
from tileauto.records import (
    BUSY_NOTE,
    NOT_COMPARED_NOTE,
    BuildResult,
    BuildStatus,
    LatencyStats,
    RunOutcome,
    Trial,
    TrialStatus,
    Validation,
)

log = get_logger("session")

_BUILD_STATUS = {
    BuildStatus.ERROR: TrialStatus.COMPILE_ERROR,
    BuildStatus.TIMEOUT: TrialStatus.COMPILE_TIMEOUT,
    BuildStatus.CRASH: TrialStatus.COMPILE_CRASH,
    BuildStatus.OUT_OF_MEMORY: TrialStatus.COMPILE_OUT_OF_MEMORY,  # measured again next time
    BuildStatus.CANCELLED: TrialStatus.CANCELLED,  # measured again next time
}

# the default config's run statuses after which the run worker holds its outputs (a mismatch
# of a manual check on the default is found after they are kept; one of unwritten outputs,
# before: the run says which in ``RunOutcome.reference_kept``, this is for a runner that does
# not say, a scripted one)
REFERENCE_KEPT = frozenset({TrialStatus.OK, TrialStatus.MISMATCH})

# the run statuses only a run that reached the check ends with (the guard elements, then the
# comparison); a run that ended otherwise (a run error, a crash, a timeout, an out-of-memory
# kill, an interrupt) was checked against nothing, and its trial's validation is None
CHECKED = frozenset({TrialStatus.OK, TrialStatus.MISMATCH, TrialStatus.OUT_OF_BOUNDS})


def trial_of(
    index: int, build: BuildResult, run: RunOutcome | None, validation: Validation
) -> Trial:
    """The trial of one config at ``index``: its build's failure, or its run's outcome
    (``validation`` only when the run reached the check, see :data:`CHECKED`)."""
    if not build.ok:
        return Trial(
            index,
            build.config,
            _BUILD_STATUS.get(build.status, TrialStatus(build.status.value)),
            compile_s=build.compile_s,
            error=build.error,
        )
    if run is None:
        return Trial(
            index,
            build.config,
            TrialStatus.NOT_RUN,
            compile_s=build.compile_s,
            error="no run worker was available",
        )
    bad = LatencyStats.bad_sample(run.samples_ns) if run.status.ok else None
    ok = run.status.ok and run.samples_ns and bad is None
    latency = LatencyStats.from_samples_ns(run.samples_ns) if ok else None
    status, error = run.status, run.error
    if status.ok and latency is None:
        status, error = TrialStatus.RUN_ERROR, bad or "the timer returned no samples"
    return Trial(
        index,
        build.config,
        status,
        latency,
        build.compile_s,
        run.run_s,
        error,
        run.notes,
        validation=validation if run.status in CHECKED else None,
    )


def validation_of(
    profile: ProfileArgs, run: RunOutcome, *, is_default: bool, default: Trial | None
) -> Validation:
    """What the run worker checked a config's outputs against (its rules, restated);
    ``default``: the default config's trial, when it was measured. (A run that never reached
    the check gets None in :func:`trial_of`.)"""
    if profile.skip_check:
        return Validation.SKIPPED
    if profile.ref_prog is not None:
        return Validation.REFERENCE
    # the default config is the reference, not checked against itself
    if is_default or any(n.startswith(NOT_COMPARED_NOTE) for n in run.notes):
        return Validation.SKIPPED
    if run.reference_kept is not None:  # the run worker says whether it held its outputs
        return Validation.DEFAULT if run.reference_kept else Validation.SKIPPED
    # a runner that does not say: when the default's run failed there is nothing to compare
    if default is None or default.status not in REFERENCE_KEPT:
        return Validation.SKIPPED
    return Validation.DEFAULT


def warn_if_busy(name: str, timed: Sequence[Trial], device_type: str = "cpu") -> None:
    """Say so when configs were timed while other processes held the cores (their notes),
    with the advice that fits the device: on a GPU the kernel runs on the GPU, timed with CUDA
    events, and the waits are the run worker's, while the compile workers hold the cores."""
    busy = [t for t in timed if any(n.startswith(BUSY_NOTE) for n in t.notes)]
    if not busy:
        return
    head = (
        f"tileauto: autotune {name}: {len(busy)} of {len(timed)} configs were {BUSY_NOTE} "
        "(their threads waited for a CPU during a quarter of their timing or more; see each "
        "trial's notes)"
    )
    if device_type == "cpu":
        message = (
            f"{head}: the ranking may be the scheduler's. Tune on a quiet machine, or with "
            "num_threads=1 (docs: tuning, 'On a shared machine')."
        )
    else:
        message = (
            f"{head}. The kernels run on the GPU, timed with CUDA events, which such waits "
            "move little (on an H100, a spread of 0.7% against 0.5%: docs/performance.md); "
            "to leave the run worker a core, set TILEAUTO_AUTO_TUNING_CPU_COUNTS below the "
            "number of cores."
        )
    warnings.warn(message, RuntimeWarning, stacklevel=2)
    log.debug("%s", message)
