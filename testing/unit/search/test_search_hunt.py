"""Fixes from a bug hunt of the search side: Kernel Tuner objectives, AutoSearch.within() and
the family, loader leniency, a prior folder's bad entries, the stop reason of a search that
measured everything, clear errors for bad arguments, and a prior's describe()."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from search_fakes import ok_trial

import tileauto.search.guided as guided_module
from tileauto.errors import ConfigSpaceError
from tileauto.records import Trial, TrialStatus
from tileauto.search import (
    AutoSearch,
    GuidedSearch,
    RecordedSpace,
    SearchStrategy,
    StopReason,
    replay,
    run_search,
)
from tileauto.search.optuna_sampler import OptunaSearch
from tileauto.search.prior import describe_prior, match
from tileauto.search.strategies import Exhaustive
from tileauto.space import ListSpace, Param, product

REPEATED = "repeated config (its best record kept)"  # RecordedSpace.left_out's reason


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _records(values: list[int], time: float | str | None = None) -> dict[str, dict[str, object]]:
    return {str(a): {"a": a, "time": float(a) if time is None else time} for a in values}


SMALL = RecordedSpace.from_latencies([{"a": i} for i in range(10)], [1.0 + i for i in range(10)])


# -- 3: a Kernel Tuner objective that is higher-is-better ------------------------------------
def test_a_throughput_objective_ranks_configs_by_their_time(tmp_path):
    cache = {str(a): {"a": a, "time": float(a), "GFLOP/s": 100.0 / a} for a in (1, 2, 4, 8)}
    cache["16"] = {"a": 16, "time": "RuntimeFailedConfig", "GFLOP/s": "RuntimeFailedConfig"}
    doc = {
        "tune_params_keys": ["a"],
        "tune_params": {"a": [1, 2, 4, 8, 16]},
        "objective": "GFLOP/s",
        "objective_higher_is_better": True,
        "cache": cache,
    }
    rec = RecordedSpace.load(_write(tmp_path / "gflops.json", doc))
    assert rec.optimum_ms == 1.0
    assert [t.latency_ms for t in rec.trials[:4]] == [1.0, 2.0, 4.0, 8.0]
    assert rec.failed == 1 and rec.trials[4].status is TrialStatus.RUN_ERROR
    best = min(range(4), key=lambda i: rec.trials[i].latency_ms)
    assert rec.space.config(best) == {"a": 1}  # the fastest, not the highest GFLOP/s
    # a lower-is-better objective is read as it is (the default, time, included)
    lower = {**doc, "objective_higher_is_better": False}
    assert RecordedSpace.load(_write(tmp_path / "lower.json", lower)).optimum_ms == 100.0 / 8


def test_a_throughput_objective_without_times_is_refused_naming_it(tmp_path):
    cache = {str(a): {"a": a, "GFLOP/s": 100.0 / a} for a in (1, 2)}
    doc = {
        "tune_params": {"a": [1, 2]},
        "objective": "GFLOP/s",
        "objective_higher_is_better": True,
        "cache": cache,
    }
    with pytest.raises(ValueError, match=r"no_time\.json: cache\['1'\] has no 'time'.*'GFLOP/s'"):
        RecordedSpace.load(_write(tmp_path / "no_time.json", doc))
    odd = {**doc, "objective_higher_is_better": "yes"}
    with pytest.raises(ValueError, match="objective_higher_is_better must be true or false"):
        RecordedSpace.load(_write(tmp_path / "odd.json", odd))


# -- 4: AutoSearch.within() keeps the family ---------------------------------------------------
def test_within_keeps_everything_handed_in():
    auto = AutoSearch(prior="auto")
    records = [SMALL]
    auto.use_prior(records)
    auto.use_family("fam")
    bounded = auto.within(5)
    assert bounded is not auto and bounded.limit == 5 and auto.limit is None
    assert bounded._family == "fam" and bounded._given is records and bounded.prior == "auto"


def _bowl2(seed: int, family: str) -> RecordedSpace:
    space = product(a=list(range(1, 21)), b=list(range(1, 21)))
    lat = [1.0 + (c["a"] * 7 + c["b"] * seed) % 13 for c in space]
    return RecordedSpace.from_latencies(space, lat, family=family)


def test_same_problem_records_count_under_max_trials(monkeypatch):
    """A replay budget (run_search's max_trials) bounds AutoSearch with within(): the prior's
    records of the replayed record's family are still the same problem's."""
    seen: list[list[bool]] = []
    start = guided_module.GuidedSearch.start

    def spy(self, space, **kwargs):
        start(self, space, **kwargs)
        seen.append([s.same_problem for s in self.matched.sources] if self.matched else [])

    monkeypatch.setattr(guided_module.GuidedSearch, "start", spy)
    here, same, other = _bowl2(1, "fam"), _bowl2(2, "fam"), _bowl2(3, "other")
    auto = replay(here, AutoSearch(), budget=40, prior=[same, other])
    assert seen == [[True, False]]
    guided = replay(here, GuidedSearch(40), budget=40, prior=[same, other])
    assert seen[-1] == [True, False]
    assert auto.trace == guided.trace  # the same guided search, the same trials


# -- 6: records that do not fit their format -------------------------------------------------
def test_a_passing_trial_without_latency_is_refused_naming_the_record(tmp_path):
    doc = {
        "format": "tileauto-trials/1",
        "trials": [
            {"config": {"a": 2}, "status": "ok", "latency_ms": 2.0},
            {"config": {"a": 1}, "status": "ok"},
        ],
    }
    with pytest.raises(ValueError, match=r"ok\.json: trials\[1\] has status ok but no latency"):
        RecordedSpace.load(_write(tmp_path / "ok.json", doc))


def test_repeated_parameter_names_are_refused(tmp_path):
    doc = {
        "tune_params_keys": ["a", "a", "b"],
        "tune_params": {"a": [1, 2], "b": [1]},
        "cache": {"1,1": {"a": 1, "b": 1, "time": 1.0}},
    }
    with pytest.raises(ValueError, match=r"keys\.json: tune_params_keys names \['a'\] more than"):
        RecordedSpace.load(_write(tmp_path / "keys.json", doc))
    with pytest.raises(ConfigSpaceError, match=r"parameters \['a'\] are given more than once"):
        ListSpace([{"a": 1}], [Param.of("a", [1]), Param.of("a", [1])])
    with pytest.raises(ConfigSpaceError, match=r"parameters \['a'\] are given more than once"):
        ListSpace([{"a": 1, "b": 2}], [Param.of("a, b", [(1, 2)]), Param.of("a", [1])])


def test_a_config_cached_under_two_keys_is_one_config_its_best_kept(tmp_path):
    doc = {
        "tune_params_keys": ["a"],
        "tune_params": {"a": [1, 2]},
        "cache": {
            "1": {"a": 1, "time": 5.0},
            "2": {"a": 2, "time": 2.0},
            "1b": {"a": 1, "time": 1.0},
            "1c": {"a": 1, "time": "RuntimeFailedConfig"},
            "2b": {"a": 2, "time": 3.0},
        },
    }
    rec = RecordedSpace.load(_write(tmp_path / "twice.json", doc))
    assert len(rec) == 2 and rec.space.config(0) == {"a": 1}
    assert [t.latency_ms for t in rec.trials] == [1.0, 2.0]
    assert [t.index for t in rec.trials] == [0, 1]
    assert rec.left_out == {REPEATED: 3} and rec.failed == 0
    # a trial export with a config twice: the same rule
    export = {
        "format": "tileauto-trials/1",
        "trials": [
            {"config": {"a": 1}, "status": "compile_error"},
            {"config": {"a": 2}, "status": "ok", "latency_ms": 3.0},
            {"config": {"a": 1}, "status": "ok", "latency_ms": 4.0},
        ],
    }
    rec = RecordedSpace.load(_write(tmp_path / "export.json", export))
    assert [t.latency_ms for t in rec.trials] == [4.0, 3.0] and rec.left_out == {REPEATED: 1}


# -- 7: a prior folder with entries that are not records -------------------------------------
def test_a_prior_folders_bad_entries_are_dropped_not_an_error(tmp_path):
    folder = tmp_path / "priors"
    folder.mkdir()
    (folder / "adir.json").mkdir()  # a folder named like a record
    (folder / "notes.json").write_text(json.dumps({"what": "my notes"}))
    (folder / "broken.json.gz").write_bytes(b"\x1f\x8bnot gzip")
    good = [{"config": {"a": i}, "status": "ok", "latency_ms": 1.0 + i} for i in range(10)]
    _write(folder / "good.json", {"format": "tileauto-trials/1", "trials": good})
    matched = match(SMALL.space, folder)
    assert len(matched) == 1
    assert len(matched.dropped) == 2
    assert any("notes.json is neither a Kernel Tuner" in d for d in matched.dropped)
    assert any("broken.json.gz is a damaged gzip" in d for d in matched.dropped)
    assert not any("adir.json" in d for d in matched.dropped)  # not a file: not listed
    assert replay(SMALL, GuidedSearch(), budget=4, prior=str(folder)).trials == 4
    with pytest.raises(ValueError, match="notes.json"):  # a file named alone still raises
        match(SMALL.space, folder / "notes.json")


# -- 8: everything measured is "done" --------------------------------------------------------
def test_a_search_that_measured_every_config_is_done():
    measure = lambda batch: [(i, SMALL.trials[i]) for i in batch]  # noqa: E731
    out = run_search(Exhaustive(), SMALL.space, measure, max_trials=len(SMALL))
    assert out.stop_reason is StopReason.DONE and out.never_tried == 0
    assert "every config of the space was measured" in out.describe()
    assert replay(SMALL, "random", budget=1.0).stop_reason == "done"
    assert replay(SMALL, "random", budget=len(SMALL)).stop_reason == "done"
    assert replay(SMALL, "random", budget=len(SMALL) - 1).stop_reason == "max_trials"
    known = {0: SMALL.trials[0]}  # a known trial counts as tried
    out = run_search(Exhaustive(), SMALL.space, measure, max_trials=9, known=known)
    assert out.stop_reason is StopReason.DONE and len(out.trials) == 10


# -- 9: clear errors that name the argument --------------------------------------------------
def test_product_constraints_none_means_none():
    assert len(product(a=[1, 2], constraints=None)) == 2
    with pytest.raises(ConfigSpaceError, match="constraints must be a list .* got int 5"):
        product(a=[1, 2], constraints=5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"good_fraction": "x"}, "good_fraction must be a number in .* got 'x'"),
        ({"good_fraction": True}, "good_fraction must be a number"),
        ({"explore": None}, r"explore must be a number in \[0, 1\], got None"),
        ({"seed": "x"}, "seed must be an int >= 0 or None, got 'x'"),
        ({"seed": 1.5}, "seed must be an int >= 0 or None, got 1.5"),
    ],
)
def test_guided_search_arguments_are_checked_when_made(kwargs, match):
    with pytest.raises(ValueError, match=f"GuidedSearch {match}"):
        GuidedSearch(**kwargs)


def test_guided_search_takes_a_numpy_seed():
    assert GuidedSearch(seed=np.int64(3)).own_seed == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"budget": "x"}, "budget must be an int >= 1 or None, got 'x'"),
        ({"budget": 0}, "budget must be an int >= 1 or None, got 0"),
        ({"batch": 2.5}, "batch must be an int >= 1 or None, got 2.5"),
        ({"retries": "x"}, "retries must be an int >= 0, got 'x'"),
        ({"retries": None}, "retries must be an int >= 0, got None"),
    ],
)
def test_optuna_search_arguments_are_checked_when_made(kwargs, match):
    with pytest.raises(ValueError, match=f"OptunaSearch {match}"):
        OptunaSearch("tpe", **kwargs)


def test_seed_none_is_refused_naming_seed():
    with pytest.raises(ValueError, match="seed must be an int >= 0, got None"):
        replay(SMALL, "random", budget=5, seed=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be an int >= 0, got 'x'"):
        run_search(Exhaustive(), SMALL.space, lambda b: [], seed="x")  # type: ignore[arg-type]


@pytest.mark.parametrize("budget", [0, -1, True, "5", np.int64(0)])
def test_a_bad_replay_budget_is_named_as_budget(budget):
    with pytest.raises(ValueError, match=r"replay\(\) budget must be an int >= 1"):
        replay(SMALL, "random", budget=budget)


def test_a_replay_budget_may_be_a_numpy_int():
    assert replay(SMALL, "random", budget=np.int64(5)).trials == 5
    assert replay(SMALL, "random", budget=np.int32(3)).trials == 3
    assert replay(SMALL, "random", budget=np.float64(0.5)).trials == 5


def test_replay_prior_auto_is_a_clear_error():
    with pytest.raises(ValueError, match=r'replay\(\) prior="auto" has nothing to read'):
        replay(SMALL, "auto", budget=5, prior="auto")


def test_run_search_max_seconds_must_be_a_number():
    with pytest.raises(ValueError, match="max_seconds must be a number > 0 or None, got '1'"):
        run_search(Exhaustive(), SMALL.space, lambda b: [], max_seconds="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_seconds must be a number > 0 or None, got True"):
        run_search(Exhaustive(), SMALL.space, lambda b: [], max_seconds=True)
    out = run_search(
        Exhaustive(),
        SMALL.space,
        lambda b: [(i, SMALL.trials[i]) for i in b],
        max_trials=np.int64(3),
        plateau=np.int64(50),
    )
    assert out.stop_reason == "max_trials" and len(out.trials) == 3


class _Asks(SearchStrategy):
    """Proposes ``answer`` once, then nothing."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def start(self, space, **kwargs):  # type: ignore[no-untyped-def]
        super().start(space, **kwargs)
        self.asked = 0

    def ask(self):  # type: ignore[no-untyped-def]
        self.asked += 1
        return self.answer if self.asked == 1 else []


@pytest.mark.parametrize(
    "answer, match",
    [
        (None, r"_Asks\.ask\(\) must return a list of int indices .* got NoneType None"),
        (3, r"_Asks\.ask\(\) must return a list of int indices .* got int 3"),
        ("2", r"_Asks\.ask\(\) must return a list of int indices .* got str '2'"),
        ([2.7], r"_Asks\.ask\(\) must return int indices of the space, got float 2\.7"),
        (["2"], r"_Asks\.ask\(\) must return int indices of the space, got str '2'"),
        ([True], r"_Asks\.ask\(\) must return int indices of the space, got bool True"),
        (np.asarray([1.0]), r"_Asks\.ask\(\) must return int indices of the space, got float64"),
    ],
)
def test_a_strategy_asking_for_what_is_not_an_index_is_named(answer, match):
    measure = lambda batch: [(i, SMALL.trials[i]) for i in batch]  # noqa: E731
    with pytest.raises(TypeError, match=match):
        run_search(_Asks(answer), SMALL.space, measure)


@pytest.mark.parametrize(
    "answer",
    [[1, 2], (1, 2), np.asarray([1, 2]), np.asarray([1, 2], dtype=np.uint8), [np.int64(1), 2]],
)
def test_integer_proposals_of_any_kind_are_measured(answer):
    measure = lambda batch: [(i, SMALL.trials[i]) for i in batch]  # noqa: E731
    out = run_search(_Asks(answer), SMALL.space, measure)
    assert sorted(out.trials) == [1, 2] and all(type(i) is int for i in out.trials)


@pytest.mark.parametrize("prior", [5, 2.5, True, b"x", {"a": 1}])
@pytest.mark.parametrize("make", [GuidedSearch, AutoSearch])
def test_a_prior_that_can_never_be_records_is_refused_when_made(make, prior):
    with pytest.raises(
        TypeError, match=f"{make.__name__} prior must be .* got {type(prior).__name__}"
    ):
        make(prior=prior)


# -- 10: describe() of a prior ----------------------------------------------------------------
def test_a_prior_path_is_described_by_its_text(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert GuidedSearch(prior=a).describe() != GuidedSearch(prior=b).describe()
    assert GuidedSearch(prior=a).describe() == GuidedSearch(prior=str(a)).describe()
    assert AutoSearch(prior=a).describe() != AutoSearch(prior=b).describe()
    assert describe_prior([a]) != describe_prior([b])


def test_a_recorded_space_prior_is_described_by_its_source_and_digest():
    one = RecordedSpace.from_latencies([{"a": 1}, {"a": 2}], [1.0, 2.0])
    other = RecordedSpace.from_latencies([{"a": 1}, {"a": 2}], [1.0, 3.0])
    assert describe_prior(one) != describe_prior(other)
    assert GuidedSearch(prior=one).describe() != GuidedSearch(prior=other).describe()
    assert describe_prior([one]) != describe_prior([other])
    again = RecordedSpace.from_latencies([{"a": 1}, {"a": 2}], [1.0, 2.0])
    assert (
        describe_prior(one) == describe_prior(again) == "RecordedSpace(2 configs, eaa885ffb17deff2)"
    )
    loaded = RecordedSpace.from_latencies(one.space, [1.0, 2.0], source="x/one.json", kernel="k")
    assert (
        describe_prior(loaded)
        == "RecordedSpace('x/one.json', kernel='k', 2 configs, eaa885ffb17deff2)"
    )


def test_a_list_of_trials_is_described_as_one_record():
    trials = [ok_trial(i, 1.0 + i) for i in range(558)]
    assert isinstance(trials[0], Trial)
    assert describe_prior(trials).startswith("1 record (558 trials, ")
    assert describe_prior([trials, trials]).startswith("2 records: [1 record (558 trials, ")
    dicts = [{"config": {"a": 1}, "latency_ms": 1.0}]
    assert "prior=1 record (1 trial, " in GuidedSearch(prior=dicts).describe()
