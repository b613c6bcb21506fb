"""Stages resolved before a session runs: None is the problem's own, a given stage is kept."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from tileauto.build.cached import CachedBuilder
from tileauto.search import RandomSearch
from tileauto.settings import Settings
from tileauto.testing import RecordingReporter, ScriptedBuilder, ScriptedRunner
from tileauto.tune import defaults
from tileauto.tune.stages import BuildStage, RunStage
from tileauto.tune.stores import MemoryStore


@pytest.fixture
def problem(problem):
    """Two configs: resolving the stages needs no more."""
    return functools.partial(problem, [{"block": 16}, {"block": 32}])


def test_given_stages_are_handed_over_as_they_are(problem):
    builder, runner = ScriptedBuilder(), ScriptedRunner(lambda c: 1.0)
    store, reporter, search = MemoryStore("k"), RecordingReporter(), RandomSearch(seed=1)
    s = defaults.session(
        problem(), builder=builder, runner=runner, store=store, search=search, reporter=reporter
    )
    assert (s.builder, s.runner, s.store, s.search, s.reporter) == (
        builder,
        runner,
        store,
        search,
        reporter,
    )
    assert s.load_kernel == builder.load_kernel  # the builder's own loader
    assert s.run().config == {"block": 16}


def test_the_local_executor_makes_its_builder_when_the_session_tunes(problem, tmp_path):
    from tileauto.build.builder import Builder
    from tileauto.run.runner import Runner

    s = defaults.session(problem(search="exhaustive"))
    # neither is made before the session tunes: a cache hit needs no runner and no builder
    assert not isinstance(s.runner, RunStage) and not isinstance(s.builder, BuildStage)
    assert isinstance(s._runner(), Runner) and s._runner() is s.runner
    assert s.search.describe() == "Exhaustive"
    made = s.builder(tmp_path, 2)  # what the session does once it claimed its scratch folder
    assert isinstance(made, CachedBuilder)  # the kernel cache in front of the local builder
    assert isinstance(made.inner, Builder) and made.workers <= 3
    made.close()


def test_without_the_kernel_cache_the_builder_is_the_local_one(problem, tmp_path, monkeypatch):
    from tileauto.build.builder import Builder

    p = problem()
    p = dataclasses.replace(p, settings=Settings.from_env({"TILEAUTO_DISABLE_CACHE": "1"}))
    made = defaults.session(p).builder(tmp_path, 2)
    assert isinstance(made, Builder)
    made.close()


def test_the_ray_executor_shares_one_cluster_and_connects_nothing_yet(problem, tmp_path):
    pytest.importorskip("ray")
    from tileauto.scale.ray import RayBuilder, RayRunner

    s = defaults.session(problem(executor="ray"))
    runner = s._runner()
    assert isinstance(runner, RayRunner)
    made = s.builder(tmp_path, 2)
    assert isinstance(made, CachedBuilder) and isinstance(made.inner, RayBuilder)
    assert made.inner.cluster is runner.cluster


def test_a_bad_search_name_fails_before_anything_runs(problem):
    with pytest.raises(TypeError):
        defaults.session(problem(), search="sideways")
