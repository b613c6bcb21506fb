"""replay: a search against a recorded space, through the tuner's loop."""

from __future__ import annotations

import json
import time

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


def test_a_prior_path_that_does_not_exist_is_named(tmp_path):
    # it was a bare FileNotFoundError: [Errno 2] No such file or directory: 'cache'
    for prior in ("cache", tmp_path / "none"):
        with pytest.raises(
            ValueError, match="replay\\(\\) prior must be .* is not a file or folder"
        ):
            replay(recorded(), "auto", budget=4, prior=prior)


def test_the_result_says_what_became_of_the_prior():
    rec = recorded()
    other = RecordedSpace.from_latencies([{"tile": t} for t in (1, 2, 4)], [3.0, 2.0, 1.0])
    misfit = replay(rec, "auto", budget=8, prior=other)  # a replay does not warn: it says
    assert misfit.prior_facts is not None and misfit.prior_facts["matched"] == []
    assert "no parameter of the space" in misfit.prior_facts["dropped"][0]
    fits = replay(rec, GuidedSearch(), budget=8, prior=[rec])
    assert fits.prior_facts is not None and len(fits.prior_facts["matched"]) == 1
    assert fits.prior_facts["dropped"] == []
    assert replay(rec, GuidedSearch(), budget=8).prior_facts is None
    assert replay(rec, "random", budget=8, prior=[rec]).prior_facts is None  # takes no prior


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


class SelfTimed(RandomSearch):
    """Random search that times its own start, ask and tell (a lower bound of its time)."""

    def start(self, space, *, parallelism=1, seed=0):
        began = time.perf_counter()
        super().start(space, parallelism=parallelism, seed=seed)
        self.own_s = time.perf_counter() - began

    def ask(self):
        began = time.perf_counter()
        batch = super().ask()
        self.own_s += time.perf_counter() - began
        return batch

    def tell(self, index, trial):
        began = time.perf_counter()
        super().tell(index, trial)
        self.own_s += time.perf_counter() - began


def test_the_result_accounts_time_as_kernel_tuners_simulation_mode():
    space, latency = bowl()
    trials = tuple(
        Trial(
            i, c, TrialStatus.OK, latency=LatencyStats(v, v, v, v, v, 1), compile_s=0.5, run_s=0.25
        )
        if (v := latency(c)) is not None
        else Trial(i, c, TrialStatus.RUN_ERROR, compile_s=0.5, run_s=0.25)  # failures cost too
        for i, c in enumerate(space)
    )
    rec = RecordedSpace(space, trials)
    strategy = SelfTimed()
    result = replay(rec, strategy, budget=40, seed=3)
    assert result.trials == 40 and result.compile_s == 20.0 and result.run_s == 10.0
    assert result.strategy_s >= strategy.own_s > 0
    assert result.simulated_s == pytest.approx(result.compile_s + result.run_s + result.strategy_s)
    assert replay(rec, SelfTimed(), budget=40, seed=3) == result  # wall time is not compared


def test_a_kernel_tuner_file_replays_with_its_recorded_seconds(tmp_path):
    doc = {
        "tune_params_keys": ["x"],
        "tune_params": {"x": [1, 2, 3]},
        "cache": {
            str(x): {"x": x, "time": 4.0 - x, "compile_time": 500.0, "verification_time": 125.0,
                     "benchmark_time": 125.0}
            for x in (1, 2, 3)
        },
    }  # fmt: skip
    path = tmp_path / "space.json"
    path.write_text(json.dumps(doc))
    result = replay(path, "exhaustive")
    assert result.compile_s == 1.5 and result.run_s == 0.75
    assert result.simulated_s >= 2.25 and result.strategy_s >= 0
