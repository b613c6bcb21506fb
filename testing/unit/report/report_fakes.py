"""Trials and run summaries for the tests of tileauto.report (not a test module)."""

from __future__ import annotations

import json
from pathlib import Path

from tileauto.records import LatencyStats, SessionSummary, Trial, TrialStatus


def ok_trial(index: int, ms: float) -> Trial:
    latency = LatencyStats.from_samples_ns([ms * 1e6, ms * 1.1e6, ms * 0.9e6])
    return Trial(index, {"block": 8 * (index + 1)}, TrialStatus.OK, latency, compile_s=0.5)


def failed_trial(index: int, status: TrialStatus = TrialStatus.COMPILE_ERROR) -> Trial:
    return Trial(index, {"block": 8 * (index + 1)}, status, error=f"{status.value} here\ndetail")


def summary_of(trials: tuple[Trial, ...], **extra) -> SessionSummary:
    ok = [t for t in trials if t.ok]
    best = min(ok, key=lambda t: t.latency_ms or 0.0) if ok else None
    fields = {
        "name": "gemm",
        "trials": trials,
        "best": best,
        "default": trials[0],
        "ref_latency_ms": 2.5,
        "elapsed_s": 1.25,
        "stop_reason": None,
        "key": "abc123",
        "error": None if best else "no config passed",
    }
    return SessionSummary(**{**fields, **extra})


def log_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
