"""replay: a search against a recorded space, through the tuner's loop."""

from __future__ import annotations

import json

import pytest
from search_fakes import bowl

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.search import (
    Exhaustive,
    GuidedSearch,
    RandomSearch,
    RecordedSpace,
    StopReason,
    replay,
)


def recorded():
    space, latency = bowl()
    return RecordedSpace.from_latencies(space, [latency(c) for c in space], kernel="bowl")


def test_exhaustive_finds_the_optimum_and_failures_cost_trials():
    rec = recorded()
    result = replay(rec, "exhaustive")
    assert result.score == 1.0 and result.best_ms == rec.optimum_ms
    assert result.trials == len(rec) and len(result.trace) == len(rec)
    assert result.stop_reason is StopReason.DONE and result.strategy == "Exhaustive"
    assert rec.trials[result.best_index].latency_ms == rec.optimum_ms


def test_a_budget_as_trials_or_as_a_share_of_the_space():
    rec = recorded()
    by_count = replay(rec, RandomSearch(), budget=50, seed=1)
    by_share = replay(rec, RandomSearch(), budget=50 / len(rec), seed=1)
    assert by_count.trials == by_share.trials == 50
    assert by_count.trace == by_share.trace and by_count.stop_reason is StopReason.MAX_TRIALS
    assert all(a >= b for a, b in zip(by_count.trace, by_count.trace[1:]))  # best so far
    assert 0 < by_count.score <= 1 and by_count.score == rec.optimum_ms / by_count.best_ms
    with pytest.raises(ValueError, match="share"):
        replay(rec, "random", budget=1.5)


def test_guided_beats_random_on_the_record_and_reports_trials_to_reach():
    rec = recorded()
    guided = replay(rec, GuidedSearch(), budget=100, seed=0)
    sampled = replay(rec, RandomSearch(), budget=100, seed=0)
    assert guided.score == 1.0 and sampled.score < 1.0
    assert guided.trials_to_reach(0.0) is not None and sampled.trials_to_reach(0.0) is None


def test_a_smaller_budget_is_the_prefix_of_a_larger_one():
    # bench/search_quality.py reads smaller budgets off one replay's trace
    rec = recorded()
    long = replay(rec, GuidedSearch(), budget=120, seed=2)
    for budget in (20, 57, 90):
        short = replay(rec, GuidedSearch(), budget=budget, seed=2)
        assert short.trace == long.trace[:budget]


def test_replay_is_deterministic_and_takes_names():
    rec = recorded()
    assert replay(rec, "auto", budget=64, seed=5) == replay(rec, "auto", budget=64, seed=5)
    assert replay(rec, "guided", budget=30).strategy.startswith("GuidedSearch")


def test_max_seconds_spends_recorded_seconds_and_plateau_stops():
    space, latency = bowl()

    trials = tuple(
        Trial(
            i, c, TrialStatus.OK, latency=LatencyStats(v, v, v, v, v, 1), compile_s=1.0, run_s=1.0
        )
        if (v := latency(c)) is not None
        else Trial(i, c, TrialStatus.COMPILE_ERROR, compile_s=1.0)
        for i, c in enumerate(space)
    )
    rec = RecordedSpace(space, trials)
    timed = replay(rec, Exhaustive(), max_seconds=21.0)
    assert timed.stop_reason is StopReason.MAX_SECONDS and 10 <= timed.trials <= 21
    flat = replay(rec, Exhaustive(), plateau=5)
    assert flat.stop_reason is StopReason.PLATEAU


def test_replay_loads_a_path(tmp_path):
    doc = {
        "tune_params_keys": ["x"],
        "tune_params": {"x": [1, 2, 3]},
        "cache": {str(x): {"x": x, "time": 4.0 - x} for x in (1, 2, 3)},
    }
    path = tmp_path / "space.json"
    path.write_text(json.dumps(doc))
    result = replay(path, "exhaustive")
    assert result.score == 1.0 and result.best_ms == 1.0
