"""Tests of tileauto.records: latency statistics and the JSON round trip of trials."""

from __future__ import annotations

import json
import statistics

import pytest

from tileauto.records import LatencyStats, Trial, TrialStatus, Validation


def test_from_samples_ns_median_and_quantiles():
    samples_ns = [5e6, 1e6, 3e6, 2e6, 4e6]  # 1..5 ms, unsorted
    stats = LatencyStats.from_samples_ns(samples_ns)
    assert stats.median_ms == pytest.approx(3.0)
    assert stats.p20_ms == pytest.approx(1.8)  # linear interpolation at position 0.8
    assert stats.p80_ms == pytest.approx(4.2)
    assert stats.min_ms == pytest.approx(1.0)
    assert stats.mean_ms == pytest.approx(3.0)
    assert stats.samples == 5
    assert stats.spread_ms == pytest.approx(2.4)


def test_from_samples_ns_even_count_and_ints():
    stats = LatencyStats.from_samples_ns([1_000_000, 2_000_000, 3_000_000, 10_000_000])
    assert stats.median_ms == pytest.approx(2.5)
    assert stats.p20_ms == pytest.approx(1.6)
    assert stats.p80_ms == pytest.approx(5.8)  # 3 + 0.4 * (10 - 3)
    assert stats.min_ms == pytest.approx(1.0)
    assert stats.mean_ms == pytest.approx(4.0)


def test_from_samples_ns_matches_statistics_quantiles():
    samples = [float(x) for x in (7, 3, 9, 1, 4, 8, 2, 6, 5, 10, 11)]
    stats = LatencyStats.from_samples_ns([s * 1e6 for s in samples])
    q = statistics.quantiles(samples, n=5, method="inclusive")
    assert stats.p20_ms == pytest.approx(q[0])
    assert stats.p80_ms == pytest.approx(q[3])
    assert stats.median_ms == pytest.approx(statistics.median(samples))
    assert stats.p20_ms <= stats.median_ms <= stats.p80_ms


def test_from_samples_ns_single_sample():
    stats = LatencyStats.from_samples_ns([1500])
    assert stats.median_ms == stats.p20_ms == stats.p80_ms == stats.min_ms == pytest.approx(0.0015)
    assert stats.spread_ms == 0.0
    assert stats.samples == 1


def test_from_samples_ns_empty_raises():
    with pytest.raises(ValueError, match="no latency samples"):
        LatencyStats.from_samples_ns([])


def test_latency_stats_json_round_trip():
    stats = LatencyStats.from_samples_ns([1e6, 2e6, 4e6])
    data = json.loads(json.dumps(stats.to_json()))
    assert LatencyStats.from_json(data) == stats


def _trials() -> list[Trial]:
    lat = LatencyStats.from_samples_ns([1.25e6, 1.5e6, 1.75e6])
    return [
        Trial(
            index=0,
            config={"block": 32, "unroll": True, "name": "x"},
            status=TrialStatus.OK,
            latency=lat,
            compile_s=0.25,
            run_s=1.5,
            notes=("writes into input 'x'",),
        ),
        Trial(
            index=3,
            config={"block": 7},
            status=TrialStatus.COMPILE_ERROR,
            compile_s=0.1,
            error="ScheduleError: bad split\nmore text",
        ),
        Trial(index=-1, config={}, status=TrialStatus.NOT_RUN),
    ]


@pytest.mark.parametrize("trial", _trials(), ids=lambda t: t.status.value)
def test_trial_json_round_trip(trial):
    data = json.loads(json.dumps(trial.to_json()))
    assert data["status"] == trial.status.value
    back = Trial.from_json(data)
    assert back == trial
    assert isinstance(back.notes, tuple)


@pytest.mark.parametrize("status", list(TrialStatus))
def test_every_status_round_trips(status):
    trial = Trial(index=1, config={"a": 1}, status=status, error=None if status.ok else "why")
    assert Trial.from_json(json.loads(json.dumps(trial.to_json()))) == trial


def test_trial_from_minimal_json():
    back = Trial.from_json({"index": "2", "config": {"b": 1}, "status": "timeout"})
    assert back.index == 2 and back.status is TrialStatus.TIMEOUT
    assert back.latency is None and back.error is None and back.notes == ()


def test_trial_properties():
    ok, bad, not_run = _trials()
    assert ok.ok and ok.latency_ms == pytest.approx(1.5) and ok.reason == "ok"
    assert not bad.ok and bad.latency_ms is None
    assert bad.reason == "compile_error: ScheduleError: bad split"
    assert not_run.reason == "not_run: no message"
    moved = bad.at_index(9)
    assert moved.index == 9 and moved.config == bad.config and bad.index == 3


def test_status_ok_property():
    assert TrialStatus.OK.ok
    assert not any(s.ok for s in TrialStatus if s is not TrialStatus.OK)


def test_unknown_status_is_rejected():
    with pytest.raises(ValueError):
        Trial.from_json({"index": 0, "config": {}, "status": "exploded"})


def test_trial_validation_and_cache_hit_round_trip_through_json():
    trial = Trial(
        index=2,
        config={"block": 8},
        status=TrialStatus.OK,
        latency=LatencyStats.from_samples_ns([1e6]),
        validation=Validation.REFERENCE,
    )
    data = json.loads(json.dumps(trial.to_json()))
    assert data["validation"] == "reference" and data["cache_hit"] is False
    assert Trial.from_json(data) == trial
    marker = Trial.from_json({**data, "cache_hit": True})
    assert marker.cache_hit and marker.validation is Validation.REFERENCE
    assert {v.value for v in Validation} == {"reference", "default", "skipped"}


def test_an_old_trial_without_validation_or_cache_hit_loads_with_defaults():
    old = {"index": 0, "config": {"b": 1}, "status": "ok", "latency": None, "notes": []}
    back = Trial.from_json(old)
    assert back.validation is None and back.cache_hit is False


def test_an_unknown_validation_names_the_field_and_the_choices():
    with pytest.raises(
        ValueError, match=r"'validation' must be one of reference, default, skipped.*got 'guessed'"
    ):
        Trial.from_json({"index": 0, "config": {}, "status": "ok", "validation": "guessed"})
