"""The contenders timed again, interleaved, before the winner is picked.

Each config was timed in one block; a slow spell of a shared machine can sink one block.
Re-timing the best few in rounds that visit each of them in turn makes the comparison between
them fair: the same spell hits all of them.

A kernel that crashes or hangs on a later call (a race, an uninitialized read) is caught here
too: when the interleaved re-timing kills the run worker, each contender is re-timed alone to
find which one did it; that config takes the failure (``crash``, ``timeout``...), and the
others are re-timed again without it.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from typing import Any

from tileauto._logging import get_logger
from tileauto.records import LatencyStats, RunOutcome, Trial
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

    A config whose kernel kills the run worker or hangs while re-timed takes that failure in
    ``measured`` (with a note), and the best ``top_k`` of the others are re-timed without it.
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
            return
        if isinstance(samples, RunOutcome):
            if not _blame(runner, chosen, measured, artifacts, samples):
                return
            continue
        share = (time.perf_counter() - start) / len(chosen)
        note = f"{RETIMED} {best}" + (" and the default config" if best < len(chosen) else "")
        for cid, got in zip(chosen, samples, strict=True):
            if got and LatencyStats.bad_sample(got) is None:  # else the first timing stands
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
    """The interleaved re-timing of ``chosen`` ended in ``failure`` (the worker died or hung):
    re-time each config alone and mark those that fail so. Returns whether one was found;
    when none fails alone, every contender gets a note and a warning says so (their first
    timings stand)."""
    culprits = []
    for cid in chosen:
        alone = _retime(runner, [cid], measured, artifacts, rounds=1)
        if isinstance(alone, RunOutcome):
            culprits.append(cid)
            t = measured[cid]
            measured[cid] = replace(
                t,
                status=alone.status,
                latency=None,
                error=f"when re-timed: {alone.error}",
                notes=(*t.notes, FAILED_WHEN_RETIMED),
            )
            log.warning("config %s %s: %s", t.config, FAILED_WHEN_RETIMED, alone.error)
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
