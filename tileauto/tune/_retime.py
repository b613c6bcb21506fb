"""The contenders timed again, interleaved, before the winner is picked.

Each config was timed in one block; a slow spell of a shared machine can sink one block.
Re-timing the best few in rounds that visit each of them in turn makes the comparison between
them fair: the same spell hits all of them.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from tileauto.records import LatencyStats, Trial
from tileauto.tune.stages import RunStage

# passes over the contenders when re-timing them interleaved (each pass: 2 warmup calls and
# rep / RETIME_ROUNDS timed ones per config; see tileauto.run.worker.retime)
RETIME_ROUNDS = 10


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
    the runner cannot re-time (it returns None)."""
    ranked = sorted(
        (t.latency_ms, cid)
        for cid, t in measured.items()
        if t.ok and t.latency_ms is not None and cid in artifacts and cid != default_id
    )
    chosen = [cid for _, cid in ranked[:top_k]]
    if top_k < 2 or len(chosen) < 2:
        return
    if default_id in artifacts and measured[default_id].ok:
        chosen.append(default_id)
    start = time.perf_counter()
    samples = runner.retime(
        [(artifacts[c], measured[c].config) for c in chosen], rounds=RETIME_ROUNDS
    )
    if samples is None:
        return
    share = (time.perf_counter() - start) / len(chosen)
    for cid, got in zip(chosen, samples, strict=True):
        if got and LatencyStats.bad_sample(got) is None:  # else the first timing stands
            t = measured[cid]
            measured[cid] = replace(
                t,
                latency=LatencyStats.from_samples_ns(got),
                run_s=(t.run_s or 0.0) + share,
                notes=(*t.notes, f"re-timed interleaved with the best {len(chosen)}"),
            )
