"""The contenders timed again, interleaved, before the winner is picked.

Each config was timed in one block; a slow spell of a shared machine can sink one block.
Re-timing the best few in rounds that visit each of them in turn makes the comparison between
them fair: the same spell hits all of them.

A kernel that crashes, hangs or raises on a later call (a race, an uninitialized read) is
caught here too: when the interleaved re-timing fails, each contender is re-timed alone, with
at least as many calls as it had interleaved, to find which one did it; that config takes the
failure (``crash``, ``timeout``, ``run_error``...), and the others are re-timed again without
it. So does a config whose re-timing gives a sample that is no latency (a timer's NaN).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from typing import Any

from tileauto._logging import get_logger
from tileauto.records import LatencyStats, RunOutcome, Trial, TrialStatus
from tileauto.tune.stages import RunStage

log = get_logger("session")

# passes over the contenders when re-timing them interleaved (each pass: 2 warmup calls and
# rep / RETIME_ROUNDS timed ones per config; see tileauto.run.worker.retime)
RETIME_ROUNDS = 10

FAILED_WHEN_RETIMED = "passed its first run, then failed when re-timed"
RETIMED = "re-timed interleaved with the best"  # a re-timed config's note begins so


def contenders(
    measured: dict[str, Trial], default_id: str, top_k: int, artifacts: Any = None
) -> list[str]:
    """The ``top_k`` fastest configs that passed (with a library in ``artifacts``, if given),
    the default left out: the configs a re-timing compares."""
    ranked = sorted(
        (t.latency_ms, cid)
        for cid, t in measured.items()
        if t.ok
        and t.latency_ms is not None
        and cid != default_id
        and (artifacts is None or cid in artifacts)
    )
    return [cid for _, cid in ranked[:top_k]]


def retime_contenders(
    runner: RunStage,
    measured: dict[str, Trial],
    artifacts: dict[str, Any],
    default_id: str,
    top_k: int,
) -> None:
    """Time the ``top_k`` fastest configs that passed and have a library, and the default (the
    baseline of every speedup, timed the same way), again in interleaved rounds; their trials
    in ``measured`` take the new figures. Nothing happens for fewer than 2 contenders, or when
    the runner cannot re-time (it returns None).

    A config whose kernel kills the run worker, hangs or raises while re-timed, or whose
    samples are no latency (a NaN, none), takes that failure in ``measured`` (with a note), and
    the best ``top_k`` of the others are re-timed without it.
    """
    while True:  # each pass either ends or marks at least one config failed
        chosen = contenders(measured, default_id, top_k, artifacts)
        if top_k < 2 or len(chosen) < 2:
            return
        best = len(chosen)  # the default config is compared with them, not among the best
        if default_id in artifacts and measured[default_id].ok:
            chosen.append(default_id)
        start = time.perf_counter()
        samples = _retime(runner, chosen, measured, artifacts, RETIME_ROUNDS)
        if samples is None:
            configs = [measured[c].config for c in chosen]
            log.info("the runner could not re-time %s; their first timings stand", configs)
            return
        if isinstance(samples, RunOutcome):
            if not _blame(runner, chosen, measured, artifacts, samples):
                return
            continue
        bad = {cid: _unusable(got) for cid, got in zip(chosen, samples, strict=True)}
        if any(bad.values()):  # a timer's NaN fails its config as in a first timing
            for cid, why in bad.items():
                if why is not None:
                    _fail(measured, cid, RunOutcome(TrialStatus.RUN_ERROR, error=why))
            continue
        share = (time.perf_counter() - start) / len(chosen)
        note = f"{RETIMED} {best}" + (" and the default config" if best < len(chosen) else "")
        for cid, got in zip(chosen, samples, strict=True):
            t = measured[cid]
            # an earlier run's re-timing note went with the latency this one replaces
            kept = tuple(n for n in t.notes if not n.startswith(RETIMED))
            measured[cid] = replace(
                t,
                latency=LatencyStats.from_samples_ns(got),
                run_s=(t.run_s or 0.0) + share,
                notes=(*kept, note),
            )
        return


def _unusable(samples: tuple[float, ...]) -> str | None:
    """Why a re-timing's samples cannot be a latency (none, or a NaN, inf or negative one), or
    None: the reasons a first timing's would fail its config as ``run_error``."""
    return LatencyStats.bad_sample(samples) if samples else "the timer returned no samples"


def _fail(measured: dict[str, Trial], cid: str, failure: RunOutcome) -> None:
    """Config ``cid`` passed its first run and failed when re-timed: it takes ``failure``."""
    t = measured[cid]
    measured[cid] = replace(
        t,
        status=failure.status,
        latency=None,
        error=f"when re-timed: {failure.error}",
        notes=(*t.notes, FAILED_WHEN_RETIMED),
    )
    log.warning("config %s %s: %s", t.config, FAILED_WHEN_RETIMED, failure.error)


def _retime(
    runner: RunStage,
    chosen: list[str],
    measured: dict[str, Trial],
    artifacts: dict[str, Any],
    rounds: int,
) -> list[tuple[float, ...]] | RunOutcome | None:
    return runner.retime([(artifacts[c], measured[c].config) for c in chosen], rounds=rounds)


def _blame(
    runner: RunStage,
    chosen: list[str],
    measured: dict[str, Trial],
    artifacts: dict[str, Any],
    failure: RunOutcome,
) -> bool:
    """The interleaved re-timing of ``chosen`` ended in ``failure`` (the worker died, hung, or
    a kernel raised): re-time each config alone and mark those that fail so. Returns whether
    one was found; when none fails alone, every contender gets a note and a warning says so
    (their first timings stand).

    Alone, each config is re-timed with the rounds asked of the interleaved pass: at least as
    many calls on its buffers as it had there (each round warms up again; the rounds are capped
    by the fewest timed runs of the configs timed together), so a kernel that fails on its Nth
    call on the same buffers fails alone too (one round gave it fewer, and it won unfound).
    """
    culprits = []
    for cid in chosen:
        alone = _retime(runner, [cid], measured, artifacts, RETIME_ROUNDS)
        if alone is not None and not isinstance(alone, RunOutcome):  # timed: are they a latency?
            why = _unusable(alone[0])
            alone = None if why is None else RunOutcome(TrialStatus.RUN_ERROR, error=why)
        if alone is not None:
            culprits.append(cid)
            _fail(measured, cid, alone)
    if culprits:
        return True
    why = (
        f"the interleaved re-timing failed ({failure.status.value}: {failure.error}) and no "
        "config failed when re-timed alone; the first timings stand"
    )
    for cid in chosen:
        measured[cid] = replace(measured[cid], notes=(*measured[cid].notes, why))
    warnings.warn(
        f"tileauto: {why} (configs {[measured[c].config for c in chosen]}); one of them may "
        "crash or hang now and then",
        RuntimeWarning,
        stacklevel=2,
    )
    return False
