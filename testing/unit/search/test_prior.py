"""Priors: records of the same kernel measured elsewhere, matched by parameter name and value,
trusted as far as they rank the new space's measurements alike; and the cache side."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from search_fakes import bowl

from tileauto.records import TrialStatus
from tileauto.search import AutoSearch, GuidedSearch, RecordedSpace, SameProblem, replay
from tileauto.search.prior import agreement, match
from tileauto.space import product

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))
from cache_fakes import fake_result, open_store, trial  # noqa: E402


def recorded_bowl(noise: float = 0.0, seed: int = 0) -> RecordedSpace:
    """The bowl of search_fakes measured on some device: its latencies, times a noise."""
    space, latency = bowl()
    rng = random.Random(seed)
    values = []
    for config in space:
        value = latency(config)
        values.append(None if value is None else value * (1 + noise * rng.random()))
    return RecordedSpace.from_latencies(space, values, device=f"device {seed}")


def shuffled(record: RecordedSpace, seed: int = 1) -> RecordedSpace:
    latencies = [t.latency_ms if t.ok else None for t in record.trials]
    random.Random(seed).shuffle(latencies)
    return RecordedSpace.from_latencies(record.space, latencies, device="unlike")


def test_match_by_name_and_value_with_missing_and_extra_parameters():
    space = product(a=[1, 2, 4], b=["x", "y"], c=[0, 1])
    prior = [  # no c; an extra d (the best of its d values counts); a value the space lacks
        {"config": {"a": 1, "b": "x", "d": 0}, "latency_ms": 4.0},
        {"config": {"a": 1, "b": "x", "d": 1}, "latency_ms": 1.0},
        {"config": {"a": 2, "b": "y", "d": 0}, "latency_ms": 2.0},
        {"config": {"a": 4.0, "b": "y", "d": 0}, "status": "compile_error", "latency_ms": None},
        {"config": {"a": 8, "b": "x", "d": 0}, "latency_ms": 0.1},  # a = 8: not in the space
        {"config": {"a": 2, "b": "x", "d": 0}, "status": "not_run", "latency_ms": None},
    ]
    matched = match(space, prior)
    assert len(matched) == 1 and not matched.dropped
    configs = [{"a": 1, "b": "x", "c": 1}, {"a": 2, "b": "y", "c": 0}, {"a": 4, "b": "y", "c": 0}]
    codes = space.codes([space.find(c) for c in configs] + [space.find({"a": 2, "b": "x", "c": 0})])
    pct = matched.lookup(codes)[:, 0]
    # ranked among the passing records: 0.1 (a=8), 1.0, 2.0, 4.0 -> the a=1 config is 2nd of 4
    assert pct[0] == pytest.approx(1 / 3) and pct[1] == pytest.approx(2 / 3)
    assert pct[2] == 1.0  # failed there: last (4.0 matched a = 4, a number either way)
    assert np.isnan(pct[3])  # never tried there: nothing said, not a failure
    ranked = matched.ranked(np.random.default_rng(0))
    assert [space.config(int(i))["a"] for i in ranked[:2]] == [1, 1]  # both c values filled in


def test_records_that_share_nothing_are_dropped_with_the_reason_never_an_error():
    space = product(a=[1, 2], b=[3, 4])
    matched = match(space, [[{"config": {"x": 1}, "latency_ms": 1.0}], []])
    assert len(matched) == 0
    assert "no parameter of the space" in matched.dropped[0] and "['x']" in matched.dropped[0]
    assert "no records" in matched.dropped[1]
    values = match(space, [{"config": {"a": 9, "b": 3}, "latency_ms": 1.0}])
    assert len(values) == 0 and "none of its configs has values" in values.dropped[0]
    result = replay(recorded_bowl(), GuidedSearch(), budget=24, prior=[[{"config": {"x": 1}}]])
    assert result.trials == 24


def test_a_prior_that_is_not_records_is_refused_naming_it():
    with pytest.raises(TypeError, match="prior must be a RecordedSpace"):
        match(product(a=[1, 2]), 42)
    with pytest.raises(TypeError, match=r"prior\[0\] holds int"):
        match(product(a=[1, 2]), [[1, 2]])
    with pytest.raises(ValueError, match="GuidedSearch prior must be .* 'cache' is not a file"):
        GuidedSearch(prior="cache")
    with pytest.raises(ValueError, match="AutoSearch prior must be"):
        AutoSearch(prior="no/such/folder")


def test_agreement_is_high_for_the_same_ranking_and_low_for_a_shuffled_one():
    rng = np.random.default_rng(0)
    logs = rng.random(40)
    other = rng.random(40)
    same = agreement(np.stack([logs, other], axis=1), logs)
    unrelated = np.corrcoef(np.argsort(np.argsort(other)), np.argsort(np.argsort(logs)))[0, 1]
    assert same[0] == pytest.approx(1.0) and same[1] == pytest.approx(unrelated)
    few = agreement(np.stack([logs[:4]], axis=1), logs[:4])
    assert few[0] == 0.0  # fewer than 6 shared measurements: no opinion


def test_a_prior_from_another_device_finds_the_optimum_in_the_first_batch():
    target = recorded_bowl(noise=0.05, seed=3)
    other = recorded_bowl(noise=0.05, seed=4)
    without = replay(target, GuidedSearch(), budget=8, seed=0)
    with_prior = replay(target, GuidedSearch(), budget=8, seed=0, prior=[other])
    assert with_prior.score > 0.95 > without.score
    assert "prior" not in with_prior.strategy  # the default prior="auto" keeps the old text
    own = replay(target, GuidedSearch(prior=[other]), budget=8, seed=0)
    assert own.score == with_prior.score and "prior=1 record: [RecordedSpace(" in own.strategy
    off = replay(target, GuidedSearch(prior=None), budget=8, seed=0, prior=[other])
    assert off.score == without.score  # prior=None: what is handed in is ignored


def test_a_record_that_disagrees_with_the_others_still_has_its_best_tried_first():
    space = product(a=list(range(6)), b=list(range(6)))

    def record(best: tuple[int, int], noise: int) -> RecordedSpace:
        values = [1.0 + abs(c["a"] - best[0]) + abs(c["b"] - best[1]) for c in space]
        values = [v * (1 + 0.01 * ((i * noise) % 7)) for i, v in enumerate(values)]
        return RecordedSpace.from_latencies(space, values, device=f"{best} {noise}")

    two_alike, unlike = [record((0, 0), 1), record((0, 0), 2)], record((5, 5), 3)
    matched = match(space, [*two_alike, unlike])
    mean = [space.config(int(i)) for i in matched.ranked(np.random.default_rng(0))]
    turns = [space.config(int(i)) for i in matched.in_turns(np.random.default_rng(0))]
    assert mean.index({"a": 5, "b": 5}) > 8  # by the mean percentile it comes late
    assert {"a": 0, "b": 0} in turns[:3] and {"a": 5, "b": 5} in turns[:3]  # each best early
    assert sorted(map(str, turns)) == sorted(map(str, mean))  # the same configs, each once
    # on the device the odd record describes: with the records taking turns, its optimum is
    # in the first batch; by the mean percentile (the default), it is not
    target, prior = record((5, 5), 4), [*two_alike, unlike]
    turns = replay(target, GuidedSearch(prior_order="turns"), budget=8, seed=0, prior=prior)
    assert turns.score == 1.0 and "prior_order='turns'" in turns.strategy
    assert replay(target, GuidedSearch(), budget=8, seed=0, prior=prior).score < 0.5
    with pytest.raises(ValueError, match='prior_order must be "mean", "turns" or "apart", got'):
        GuidedSearch(prior_order="best")


def test_apart_spreads_the_first_batch_over_the_region_the_records_agree_on():
    """Records of another problem agree on one corner; this problem's optimum is off it.
    By the mean percentile the first batch is that corner and its neighbours; "apart" takes
    the records' order too, each config three parameters away from those taken."""
    space = product(a=list(range(4)), b=list(range(4)), c=list(range(4)), d=list(range(4)))

    def record(best: tuple[int, ...], noise: int) -> RecordedSpace:
        values = [1.0 + sum(abs(c[k] - v) for k, v in zip("abcd", best)) for c in space]
        values = [v * (1 + 0.01 * ((i * noise) % 7)) for i, v in enumerate(values)]
        return RecordedSpace.from_latencies(space, values, device=f"{best} {noise}")

    prior = [record((0, 0, 0, 0), 1), record((0, 0, 0, 0), 2)]
    strategy = GuidedSearch(prior=prior)  # prior_order="apart", the default
    strategy.start(space, parallelism=8, seed=0)
    picks = [space.config(i) for i in strategy.ask()[:6]]  # the prior's six, then two at random
    assert picks[0] == {"a": 0, "b": 0, "c": 0, "d": 0}  # the records' best comes first
    for i, one in enumerate(picks):
        for other in picks[:i]:
            assert sum(one[k] != other[k] for k in "abcd") >= 3, (one, other)
    target = record((1, 1, 1, 1), 3)
    mean = replay(target, GuidedSearch(prior_order="mean"), budget=6, seed=0, prior=prior)
    apart = replay(target, GuidedSearch(), budget=6, seed=0, prior=prior)  # the default
    assert apart.score > 2 * mean.score and "prior_order='mean'" in mean.strategy


def test_the_same_problems_records_and_the_rest_take_turns_in_the_first_batch():
    """Other problems agree among themselves (the consensus), the same problem measured on an
    unlike device says otherwise: the first batch tries the best of both."""
    space = product(a=list(range(6)), b=list(range(6)))

    def record(best: tuple[int, int], noise: int) -> RecordedSpace:
        values = [1.0 + abs(c["a"] - best[0]) + abs(c["b"] - best[1]) for c in space]
        values = [v * (1 + 0.01 * ((i * noise) % 7)) for i, v in enumerate(values)]
        return RecordedSpace.from_latencies(space, values, device=f"{best} {noise}")

    other_problems = [record((0, 0), n) for n in (1, 2, 3)]
    same_problem = record((5, 5), 4)  # the same problem, on another device
    grouped = match(space, [SameProblem([same_problem]), *other_problems])
    assert [s.same_problem for s in grouped.sources] == [True, False, False, False]
    ranked = [space.config(int(i)) for i in grouped.ranked(np.random.default_rng(0))]
    assert ranked[:2] == [{"a": 5, "b": 5}, {"a": 0, "b": 0}]  # each one's best, in turns
    flat = match(space, [same_problem, *other_problems]).ranked(np.random.default_rng(0))
    assert [space.config(int(i)) for i in flat].index({"a": 5, "b": 5}) > 8  # outvoted
    assert sorted(map(str, ranked)) == sorted(str(space.config(int(i))) for i in flat)
    # where the problem's optimum is where its other device's was, the first batch has it
    target = record((5, 4), 5)
    prior = [SameProblem([same_problem]), *other_problems]
    assert replay(target, GuidedSearch(), budget=8, seed=0, prior=prior).score > 0.95
    flat_score = replay(
        target, GuidedSearch(), budget=8, seed=0, prior=[same_problem, *other_problems]
    )
    assert flat_score.score < 0.6
    # a record of the tuned call's family (a `tileauto cache prior` export) is the same too
    tagged = RecordedSpace.from_latencies(
        space, [t.latency_ms for t in same_problem.trials], family="call"
    )
    by_family = match(space, [tagged, *other_problems], family="call")
    assert [s.same_problem for s in by_family.sources] == [True, False, False, False]
    assert not any(s.same_problem for s in match(space, [tagged, *other_problems]).sources)
    on_target = RecordedSpace(target.space, target.trials, family="call")  # replay tells it
    assert replay(on_target, GuidedSearch(), budget=8, prior=[tagged, *other_problems]).score > 0.95
    # all of one kind: the mean, as before
    alone = match(space, SameProblem(other_problems)).ranked(np.random.default_rng(0))
    assert list(alone) == list(match(space, other_problems).ranked(np.random.default_rng(0)))
    assert "prior=4 records, 1 of the same problem: [" in GuidedSearch(prior=prior).describe()
    assert (
        "prior=SameProblem(3 records: [RecordedSpace("
        in GuidedSearch(prior=SameProblem(other_problems)).describe()
    )
    with pytest.raises(TypeError, match="SameProblem records must be a list .* got str"):
        SameProblem("records/")


def test_a_prior_that_does_not_fit_is_not_trusted():
    target = recorded_bowl(noise=0.05, seed=3)
    unlike = shuffled(recorded_bowl(seed=4))
    search = GuidedSearch()
    replay(target, search, budget=48, seed=0, prior=[unlike])
    assert search._trust is not None and (search._trust < 0.3).all()  # it ranks nothing alike
    fitting = GuidedSearch()
    replay(target, fitting, budget=48, seed=0, prior=[recorded_bowl(noise=0.05, seed=4)])
    assert (fitting._trust > 0.6).all()


class _CountsDraws(GuidedSearch):
    """Records how many configs each batch drew at random."""

    def start(self, space, *, parallelism=1, seed=0):  # type: ignore[no-untyped-def]
        super().start(space, parallelism=parallelism, seed=seed)
        self.random_per_ask: list[int] = []
        draw = self._untried.draw

        def counted(k: int) -> list[int]:
            picks = draw(k)
            self.random_per_ask[-1] += len(picks)
            return picks

        self._untried.draw = counted  # type: ignore[method-assign]

    def ask(self) -> list[int]:
        self.random_per_ask.append(0)
        return super().ask()


@pytest.mark.parametrize("fits", [True, False])
def test_after_a_first_batch_from_a_prior_that_missed_half_the_next_is_random(fits):
    target = recorded_bowl(noise=0.05, seed=3)
    record = recorded_bowl(noise=0.05, seed=4)
    search = _CountsDraws(explore=0.0, local=0)  # no random picks of its own
    prior = [record if fits else shuffled(record)]
    replay(target, search, budget=16, seed=0, parallelism=8, prior=prior)
    first, second = search.random_per_ask[:2]
    assert first == 2  # a quarter of the first batch is random, the rest the prior's
    assert bool((search._trust >= 0.3).any()) is fits
    assert second == (0 if fits else 4)  # the model's picks, or half at random


def test_auto_hands_the_prior_to_its_guided_search_and_keeps_its_text():
    target = recorded_bowl(noise=0.05, seed=3)
    auto = replay(target, "auto", budget=8, seed=0, prior=[recorded_bowl(0.05, seed=4)])
    assert auto.score > 0.95 and auto.strategy == "auto(budget=None)"
    assert AutoSearch(prior=None).describe() == "auto(budget=None, prior=None)"


def test_a_folder_of_exports_is_a_prior(tmp_path):
    other = recorded_bowl(noise=0.05, seed=4)
    doc = {
        "format": "tileauto-trials/1",
        "kernel": "bowl",
        "trials": [
            {
                "index": i,
                "config": other.space.config(i),
                "status": t.status.value,
                "latency_ms": t.latency_ms,
            }
            for i, t in enumerate(other.trials)
        ],
    }
    with gzip.open(tmp_path / "bowl.json.gz", "wt") as file:
        json.dump(doc, file)
    (tmp_path / "notes.txt").write_text("not a record")
    matched = match(recorded_bowl().space, tmp_path)
    assert len(matched) == 1 and matched.sources[0].name == "bowl.json.gz"
    target = recorded_bowl(noise=0.05, seed=3)
    result = replay(target, GuidedSearch(prior=str(tmp_path)), budget=8)
    assert result.score > 0.95 and f"prior={str(tmp_path)!r}" in result.strategy


# -- the cache side ---------------------------------------------------------------------------
def test_cache_prior_reads_the_kernels_tuned_entries_on_other_devices(tmp_path, tileauto_env):
    from tileauto.cache.priors import cache_prior, export_prior
    from tileauto.errors import CacheError

    space = [{"block": b} for b in (8, 16, 32)]
    for device, best in (("a", 8), ("b", 16)):
        store = open_store(space=space, device={"kind": "cpu", "mcpu": device})
        trials = [trial(i, c, 1.0 if c["block"] == best else 2.0) for i, c in enumerate(space)]
        trials.append(trial(3, {"block": 64}, status=TrialStatus.NOT_RUN))
        store.save(fake_result(tmp_path, trials, best=[c["block"] for c in space].index(best)))
    found = prior_trials(tileauto_env, "factory")
    assert len(found) == 2 and all(len(t) == 3 for t in found)  # never-tried ones left out
    assert prior_trials(tileauto_env, "another") == []
    assert cache_prior(tmp_path / "no cache here", "factory")() == ([], [])
    written = export_prior(tileauto_env, "factory", tmp_path / "out")
    assert len(written) == 2
    records = [RecordedSpace.load(p) for p in written]
    assert sorted(len(r) for r in records) == [3, 3]
    with pytest.raises(CacheError, match="no tuned entry of kernel 'nope'.*'cache_fakes:factory'"):
        export_prior(tileauto_env, "nope", tmp_path / "out2")


def test_the_same_call_on_other_devices_comes_first_in_the_cache_prior(tmp_path, tileauto_env):
    """Other problem sizes tuned since never crowd out the same call measured elsewhere."""
    import cache_fakes

    from tileauto.cache.priors import MAX_ENTRIES
    from tileauto.cache.remote import family_of

    space = [{"block": b} for b in (8, 16, 32)]

    def tune(n: int, device: str, best: int) -> str:
        store = open_store(space=space, args=(n,), device={"kind": "cpu", "mcpu": device})
        trials = [trial(i, c, 1.0 if c["block"] == best else 2.0) for i, c in enumerate(space)]
        store.save(fake_result(tmp_path, trials, best=[c["block"] for c in space].index(best)))
        return store.meta["family"]

    family = tune(64, "elsewhere", best=32)  # the oldest entry
    for n in range(MAX_ENTRIES):  # then as many other sizes on this device, newer
        assert tune(100 + n, "here", best=8) != family
    assert family == family_of(cache_fakes.factory, (64,), {})  # the fleet's name for the call
    by_age = prior_trials(tileauto_env, "factory")
    assert len(by_age) == MAX_ENTRIES and all(_best(t) == 8 for t in by_age)  # crowded out
    first = prior_trials(tileauto_env, "factory", family=family)
    assert len(first) == MAX_ENTRIES and _best(first[0]) == 32
    assert all(_best(t) == 8 for t in first[1:])  # then the newest others
    # a tuning of that call on a third device: the session's store names its family
    from types import SimpleNamespace

    from tileauto.settings import Settings
    from tileauto.tune.defaults import with_cache_prior
    from tileauto.tune.stores import DiskStore

    third = DiskStore(open_store(space=space, args=(64,), device={"kind": "cpu", "mcpu": "3"}))
    assert third.family == family
    problem = SimpleNamespace(
        settings=Settings.from_env(), factory=cache_fakes.factory, name="factory"
    )
    search = GuidedSearch()
    with_cache_prior(search, problem, third)  # type: ignore[arg-type]
    given = search._given()  # read when the search starts
    assert len(given) == MAX_ENTRIES and isinstance(given[0], SameProblem)
    (same,) = given[0].records  # the same call, elsewhere: apart from the other sizes
    assert _best(same) == 32 and all(_best(t) == 8 for t in given[1:])
    assert [s.same_problem for s in match(product(block=[8, 16, 32]), given).sources] == [
        True, *[False] * (MAX_ENTRIES - 1)
    ]  # fmt: skip


def prior_trials(root, kernel: str, **where):
    """Every entry the cache prior reads, the same call's first."""
    from tileauto.cache.priors import prior_groups

    same, others = prior_groups(root, kernel, **where)
    return same + others


def _best(trials) -> int:
    return min((t for t in trials if t.ok), key=lambda t: t.latency_ms).config["block"]


def _namesake(module: str):
    """``cache_fakes.factory``'s code under the same name, defined in another module."""
    import types

    import cache_fakes

    fn = types.FunctionType(
        cache_fakes.factory.__code__, {"__name__": module}, "factory", (16, "float32")
    )
    fn.__qualname__ = "factory"
    return fn


def test_a_prior_is_the_same_modules_kernel_of_that_name(tmp_path, tileauto_env, capsys):
    from tileauto.cache.key import factory_module
    from tileauto.cache.priors import export_prior
    from tileauto.cli import main

    space = [{"block": b} for b in (8, 16, 32)]
    for n, factory in enumerate((None, _namesake("pkg.other"), _namesake("__main__"))):
        kw = {} if factory is None else {"factory": factory}
        store = open_store(space=space, args=(64 + n,), **kw)  # three entries
        store.save(fake_result(tmp_path, [trial(i, c, 1.0 + i) for i, c in enumerate(space)]))
    assert factory_module(_namesake("pkg.other")) == "other"
    assert factory_module(_namesake("__main__")) == "cache_fakes"  # the script's file name
    assert factory_module(len) == "builtins" and factory_module(object()) is None
    # the __main__ one is cache_fakes.py's: a script is its module
    assert len(prior_trials(tileauto_env, "factory", module="cache_fakes")) == 2
    assert len(prior_trials(tileauto_env, "factory", module="other")) == 1
    assert len(prior_trials(tileauto_env, "factory", module="elsewhere")) == 0
    assert len(prior_trials(tileauto_env, "factory")) == 3  # no module: every namesake

    (one,) = export_prior(tileauto_env, "other:factory", tmp_path / "one")
    with gzip.open(one, "rt") as file:
        assert json.load(file)["module"] == "other"  # the export says whose it is
    assert capsys.readouterr().err == ""
    assert main(["cache", "prior", "factory", str(tmp_path / "all")]) == 0
    captured = capsys.readouterr()
    assert "3 entries of factory written" in captured.out
    assert "2 modules define a kernel 'factory' (cache_fakes, other)" in captured.err
    assert "MODULE:factory" in captured.err
    # `cache list` names each entry as `cache prior` takes it
    assert main(["cache", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(e["module"] for e in listed) == ["cache_fakes", "cache_fakes", "other"]
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert out.count("cache_fakes:factory") == 2 and out.count("other:factory") == 1


def test_the_export_command_writes_a_prior_folder(tmp_path, tileauto_env, capsys):
    from tileauto.cli import main

    space = [{"block": b} for b in (8, 16, 32)]
    store = open_store(space=space)
    store.save(fake_result(tmp_path, [trial(i, c, 1.0 + i) for i, c in enumerate(space)]))
    assert main(["cache", "prior", "factory", str(tmp_path / "priors")]) == 0  # the env's cache
    assert "1 entries of factory written" in capsys.readouterr().out
    target = RecordedSpace.from_latencies(space, [3.0, 2.0, 1.0])
    matched = match(target.space, str(tmp_path / "priors"))
    assert len(matched) == 1 and matched.lookup(target.space.codes([0]))[0, 0] == 0.0
    assert main(["cache", "prior", "nope", str(tmp_path / "x")]) == 1
    assert "no tuned entry of kernel 'nope'" in capsys.readouterr().err
