"""Fixes from hunt D of the search API: Kernel Tuner objectives and failure strings, tied
parameters in a recorded prior, folders and missing paths inside a list prior, a prior's
failures kept out of the first batch, replay() handing its prior in every time, a list of
trials' digest, why a prior was dropped, chunked reads, repeated configs, and argument checks."""

from __future__ import annotations

import gzip
import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from search_fakes import failed_trial, ok_trial

from tileauto.search import (
    AutoSearch,
    GuidedSearch,
    RandomSearch,
    RecordedSpace,
    SameProblem,
    replay,
    resolve_search,
)
from tileauto.search.baselines import GeneticSearch, ParticleSwarm
from tileauto.search.prior import describe_prior, match
from tileauto.search.strategies import Exhaustive
from tileauto.space import Param, product


def _kt_file(path: Path, objective: str | None, cache: dict, **header) -> Path:  # type: ignore[type-arg]
    tune = {"block_size_x": [32, 64, 128, 256], "tile": [1, 2, 4]}
    doc = {"device_name": "GPU", "kernel_name": "k", "tune_params_keys": list(tune)}
    doc |= {"tune_params": tune, "cache": cache, **header}
    if objective is not None:
        doc["objective"] = objective
    path.write_text(json.dumps(doc))
    return path


def _kt_cache() -> dict:  # type: ignore[type-arg]
    cache = {}
    for bx, t in itertools.product([32, 64, 128, 256], [1, 2, 4]):
        ms = 1.0 / (bx * t)  # the bigger the tile, the faster
        cache[f"{bx},{t}"] = {"block_size_x": bx, "tile": t, "time": ms, "GFLOP/s": 2.0 / ms}
    return cache


def _best(record: RecordedSpace) -> dict:  # type: ignore[type-arg]
    ok = [i for i, t in enumerate(record.trials) if t.ok]
    return record.space.config(min(ok, key=lambda i: record.trials[i].latency_ms))


# -- 1: a Kernel Tuner file's throughput objective without the flag ----------------------------
@pytest.mark.parametrize("objective", ["GFLOP/s", "GB/s", "TFLOP/s", "GFLOPS/W"])
def test_a_kernel_tuner_throughput_objective_without_the_flag_reads_the_time(tmp_path, objective):
    cache = _kt_cache()
    for record in cache.values():
        record[objective] = record.pop("GFLOP/s")
    record = RecordedSpace.load(_kt_file(tmp_path / "kt.json", objective, cache))
    assert _best(record) == {"block_size_x": 256, "tile": 4}
    assert record.optimum_ms == pytest.approx(1.0 / 1024)


def test_a_kernel_tuner_time_objective_is_still_read_as_a_latency(tmp_path):
    for objective in (None, "time"):
        record = RecordedSpace.load(_kt_file(tmp_path / "kt.json", objective, _kt_cache()))
        assert _best(record) == {"block_size_x": 256, "tile": 4}


# -- 13: strings and a missing objective --------------------------------------------------------
def test_a_time_written_as_a_string_is_refused_naming_the_record(tmp_path):
    cache = _kt_cache()
    cache["32,1"]["time"] = "0.5"
    with pytest.raises(ValueError, match=r"cache\['32,1'\] has time '0.5': expected a number"):
        RecordedSpace.load(_kt_file(tmp_path / "kt.json", None, cache))
    cache["32,1"]["time"] = "RuntimeFailedConfig"  # a failure Kernel Tuner writes: read as one
    record = RecordedSpace.load(_kt_file(tmp_path / "kt.json", None, cache))
    assert record.failed == 1


def test_an_objective_no_record_holds_is_named(tmp_path):
    cache = {k: {"block_size_x": r["block_size_x"], "tile": r["tile"], "GFLOP/s": 1.0}
             for k, r in _kt_cache().items()}  # fmt: skip
    with pytest.raises(ValueError, match=r"no record holds 'energy' \(or 'time'\).*'energy'"):
        RecordedSpace.load(_kt_file(tmp_path / "kt.json", "energy", cache))


# -- 2: a tied parameter against a flat record, and the reverse ---------------------------------
def _micro_latency(m: int, n: int, block: int) -> float:
    return (1.0 if (m, n) == (8, 32) else 3.0 + m / 8) + block / 1000


def test_a_tied_space_parameter_is_matched_by_a_recorded_space_with_its_names_apart():
    tiles = [(4, 16), (6, 16), (8, 32)]
    space = product(Param.of("micro_M, micro_N", tiles), block=[32, 64])
    flat = [
        {"micro_M": m, "micro_N": n, "block": b} for (m, n), b in itertools.product(tiles, [32, 64])
    ]
    record = RecordedSpace.from_latencies(flat, [_micro_latency(c["micro_M"], c["micro_N"], c["block"]) for c in flat])  # fmt: skip
    prior = match(space, record)
    assert len(prior) == 1 and prior.sources[0].shared == [0, 1]
    best = prior.ranked(np.random.default_rng(0))[0]
    assert space.config(int(best)) == {"micro_M": 8, "micro_N": 32, "block": 32}
    as_rows = match(space, [{"config": c, "latency_ms": 1.0} for c in flat])  # as trials: same
    assert as_rows.sources[0].shared == prior.sources[0].shared


def test_a_tied_record_parameter_is_matched_by_a_space_with_its_names_apart():
    tiles = [(4, 16), (6, 16), (8, 32)]
    tied = product(Param.of("micro_M, micro_N", tiles), block=[32, 64])
    record = RecordedSpace.from_latencies(tied, [_micro_latency(c["micro_M"], c["micro_N"], c["block"]) for c in tied])  # fmt: skip
    space = product(micro_M=[4, 6, 8], micro_N=[16, 32], block=[32, 64])
    prior = match(space, record)
    assert prior.sources[0].shared == [0, 1, 2]
    best = prior.ranked(np.random.default_rng(0))[0]
    assert space.config(int(best)) == {"micro_M": 8, "micro_N": 32, "block": 32}


# -- 3, 9: folders and missing paths inside a list prior ----------------------------------------
def _folder_of_records(folder: Path) -> Path:
    folder.mkdir()
    cache = _kt_cache()
    _kt_file(folder / "a.json", None, cache)
    (folder / "note.json").write_text("not json")
    return folder


def test_a_folder_inside_a_list_or_same_problem_is_its_files(tmp_path):
    space = product(block_size_x=[32, 64, 128, 256], tile=[1, 2, 4])
    folder = _folder_of_records(tmp_path / "priors")
    for prior in ([str(folder)], [folder, []], [SameProblem([folder])], SameProblem([folder])):
        matched = match(space, prior)
        assert [s.name for s in matched.sources] == ["a.json"]
        assert any("note.json is not JSON" in why for why in matched.dropped)
    assert matched.sources[0].same_problem
    result = replay(RecordedSpace.load(folder / "a.json"), "guided", budget=8, prior=[folder])
    assert result.score == 1.0


def test_a_missing_path_inside_a_list_prior_is_refused_when_the_strategy_is_made(tmp_path):
    missing = str(tmp_path / "priors-typo")
    for make in (GuidedSearch, AutoSearch):
        with pytest.raises(ValueError, match=r"prior\[1\] must be .*priors-typo.*not a file"):
            make(prior=[[], missing])
        with pytest.raises(ValueError, match=r"prior\[0\]\.records\[0\] must be"):
            make(prior=[SameProblem([missing])])


# -- 4: what failed elsewhere is not in the first batch -----------------------------------------
def test_a_prior_s_failed_configs_stay_out_of_the_first_batch():
    space = product(a=list(range(8)), b=list(range(8)))
    configs = list(space)
    latencies = [None] * len(configs)  # 62 failures, 2 configs that pass
    latencies[5], latencies[40] = 2.0, 1.0
    record = RecordedSpace.from_latencies(configs, latencies)
    search = GuidedSearch(prior=record)
    search.start(space, parallelism=8, seed=0)
    assert search.matched is not None
    assert list(search.matched.ranked(np.random.default_rng(0))) == [40, 5]  # no failure
    assert search.ask()[:2] == [40, 5]  # then random configs, not what failed there


def test_a_record_with_no_passing_config_is_dropped_with_its_reason():
    space = product(a=list(range(8)))
    rows = [{"config": {"a": a}, "status": "compile_error", "latency_ms": None} for a in range(8)]
    prior = match(space, [rows])
    assert len(prior) == 0 and prior.dropped == ["prior[0]: none of its 8 configs passed"]


# -- 5: replay() hands its prior in every time --------------------------------------------------
def _bowl() -> RecordedSpace:
    space = product(a=list(range(12)), b=list(range(12)))
    return RecordedSpace.from_latencies(
        space, [1.0 + (c["a"] - 7) ** 2 + (c["b"] - 3) ** 2 for c in space]
    )


def _unlike() -> RecordedSpace:
    space = product(a=list(range(12)), b=list(range(12)))
    return RecordedSpace.from_latencies(
        space, [1.0 + (c["a"] - 1) ** 2 + (c["b"] - 10) ** 2 for c in space]
    )


@pytest.mark.parametrize("make", [lambda: GuidedSearch(), lambda: AutoSearch(budget=24)])
def test_replay_does_not_leave_its_prior_on_the_strategy(make):
    here = _bowl()
    fresh = replay(here, make(), budget=24, seed=0)
    reused = make()
    with_prior = replay(here, reused, budget=24, seed=0, prior=[_unlike()])
    again = replay(here, reused, budget=24, seed=0)
    assert again.trace == fresh.trace and again.trace != with_prior.trace
    assert fresh.prior == again.prior == "" and with_prior.prior.startswith("1 record: [")
    assert with_prior != again


# -- 6: lists of trials by their contents -------------------------------------------------------
def test_lists_of_other_trials_are_described_apart():
    def trials(fast: int) -> list[dict]:  # type: ignore[type-arg]
        return [{"config": {"a": a}, "latency_ms": 1.0 if a == fast else 2.0} for a in range(2)]

    assert describe_prior(trials(0)) != describe_prior(trials(1))
    assert describe_prior(trials(0)) == describe_prior(trials(0))
    assert AutoSearch(prior=trials(0)).describe() != AutoSearch(prior=trials(1)).describe()
    objects = [ok_trial(0, 1.0), failed_trial(1)]
    assert describe_prior(objects) != describe_prior([ok_trial(0, 1.0), ok_trial(1, 1.5)])


# -- 7: why a prior was dropped -----------------------------------------------------------------
def test_a_prior_that_matches_nothing_warns_and_keeps_the_reasons(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "a.json").write_text("not json")
    space = product(a=[1, 2], b=[3, 4])
    search = GuidedSearch(prior=folder)
    with pytest.warns(UserWarning, match="matched no config of the space.*a.json is not JSON"):
        search.start(space, parallelism=8, seed=0)
    facts = search.prior_facts()
    assert facts is not None and facts["matched"] == [] and "a.json" in facts["dropped"][0]
    auto = AutoSearch(budget=2, prior=[[{"config": {"a": 1, "b": 3}, "latency_ms": 1.0}]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        auto.start(space, parallelism=8, seed=0)
    assert auto.prior_facts() == {"matched": ["prior[0]"], "dropped": []}
    assert GuidedSearch(prior=None).prior_facts() is None


# -- 8: max_bytes --------------------------------------------------------------------------------
def test_a_large_max_bytes_reads_only_what_the_file_holds(tmp_path):
    plain = _kt_file(tmp_path / "kt.json", None, _kt_cache())
    zipped = tmp_path / "kt.json.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, zipped):
        assert len(RecordedSpace.load(path, max_bytes=1 << 62)) == 12  # no 4 EiB buffer
        with pytest.raises(ValueError, match="holds more than 100 bytes"):
            RecordedSpace.load(path, max_bytes=100)


@pytest.mark.parametrize("bad", ["10", -1, 0, 1.5, True])
def test_max_bytes_is_checked(tmp_path, bad):
    plain = _kt_file(tmp_path / "kt.json", None, _kt_cache())
    with pytest.raises(ValueError, match="RecordedSpace.load max_bytes must be an int >= 1"):
        RecordedSpace.load(plain, max_bytes=bad)


# -- 10: a config listed twice --------------------------------------------------------------------
def test_from_latencies_keeps_a_repeated_config_once_its_best_kept():
    record = RecordedSpace.from_latencies([{"a": 1}, {"a": 1}, {"a": 2}], [5.0, 1.0, 2.0])
    assert len(record) == 2 and record.left_out == {"repeated config (its best record kept)": 1}
    assert [t.latency_ms for t in record.trials] == [1.0, 2.0]
    assert replay(record, "exhaustive").trace == (1.0, 1.0)


# -- 12: argument checks ----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_replay_checks_parallelism(bad):
    with pytest.raises(ValueError, match="replay\\(\\) parallelism must be an int >= 1"):
        replay(_bowl(), "random", budget=4, parallelism=bad)


def test_strategies_take_numpy_int_budgets():
    for make in (GuidedSearch, RandomSearch, AutoSearch):
        strategy = make(budget=np.int64(20))
        assert strategy.budget == 20 and type(strategy.budget) is int
    assert replay(_bowl(), RandomSearch(budget=np.int64(5))).trials == 5


@pytest.mark.parametrize("share", [5, 1.0, -0.1, float("nan"), "0.05", None])
def test_a_share_of_the_optimum_is_checked(share):
    record = _bowl()
    with pytest.raises(ValueError, match="RecordedSpace.within share must be a number in"):
        record.within(share)
    result = replay(record, "exhaustive")
    with pytest.raises(ValueError, match="trials_to_reach share must be a number in"):
        result.trials_to_reach(share)
    assert record.within(0.0) == 1 and result.trials_to_reach(0.0) == 7 * 12 + 3 + 1


def test_ask_or_tell_before_start_says_to_call_start():
    for strategy in (
        GuidedSearch(),
        RandomSearch(),
        Exhaustive(),
        GeneticSearch(),
        ParticleSwarm(),
    ):
        with pytest.raises(RuntimeError, match=r"ask\(\) before start\(\): call start"):
            strategy.ask()
    with pytest.raises(RuntimeError, match=r"GuidedSearch.tell\(\) before start"):
        GuidedSearch().tell(0, ok_trial(0, 1.0))


def test_guided_tell_checks_the_index():
    search = GuidedSearch()
    search.start(product(a=[1, 2, 3]), parallelism=8, seed=0)
    with pytest.raises(ValueError, match=r"tell index must be an index of the space \(0 to 2\)"):
        search.tell(8, ok_trial(8, 1.0))


# -- 15: a strategy's class -------------------------------------------------------------------------
def test_a_strategy_class_is_refused_with_what_to_pass():
    for cls in (GuidedSearch, RandomSearch, AutoSearch):
        with pytest.raises(TypeError, match=rf"pass an instance, {cls.__name__}\(\)"):
            resolve_search(cls)
    with pytest.raises(TypeError, match="pass an instance"):
        replay(_bowl(), GuidedSearch)
