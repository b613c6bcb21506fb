"""Stages resolved before a session runs: None is the problem's own, a given stage is kept."""

from __future__ import annotations

import pytest

from tileauto.options import CompileArgs, ProfileArgs
from tileauto.search import RandomSearch
from tileauto.settings import Settings
from tileauto.testing import RecordingReporter, ScriptedBuilder, ScriptedRunner
from tileauto.tune import defaults
from tileauto.tune.problem import TuningProblem
from tileauto.tune.stages import BuildStage
from tileauto.tune.stores import MemoryStore


def factory(n, block=32):  # never called: nothing here compiles
    raise AssertionError("resolving stages must not elaborate the factory")


@pytest.fixture
def problem(tmp_path):
    def make(**profile):
        return TuningProblem(
            factory=factory,
            args=(256,),
            kwargs={},
            configs=[{"block": 16}, {"block": 32}],
            compile_args=CompileArgs(),
            profile_args=ProfileArgs(**profile),
            settings=Settings.from_env({"TILEAUTO_CACHE_DIR": str(tmp_path / "cache")}),
            verbose=False,
            name="k",
        )

    return make


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
    assert isinstance(s.runner, Runner) and not isinstance(s.builder, BuildStage)
    assert s.search.describe() == "Exhaustive"
    made = s.builder(tmp_path, 2)  # what the session does once it claimed its scratch folder
    assert isinstance(made, Builder) and made.workers <= 3
    made.close()


def test_the_ray_executor_shares_one_cluster_and_connects_nothing_yet(problem, tmp_path):
    pytest.importorskip("ray")
    from tileauto.scale.ray import RayBuilder, RayRunner

    s = defaults.session(problem(executor="ray"))
    assert isinstance(s.runner, RayRunner)
    made = s.builder(tmp_path, 2)
    assert isinstance(made, RayBuilder) and made.cluster is s.runner.cluster


def test_a_bad_search_name_fails_before_anything_runs(problem):
    with pytest.raises(TypeError):
        defaults.session(problem(), search="sideways")
