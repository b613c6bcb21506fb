"""Fixtures shared by the unit tests: a tuning problem for scripted stages."""

from __future__ import annotations

import pytest

from tileauto.options import CompileArgs, ProfileArgs
from tileauto.settings import Settings
from tileauto.tune.problem import TuningProblem

SPACE = [{"block": 16}, {"block": 32}, {"block": 64}, {"block": 128}]


def scripted_factory(n, block=32):  # never called: the stages are scripted
    raise AssertionError("a scripted session must not elaborate the factory")


@pytest.fixture
def problem(tmp_path):
    """``make(configs=SPACE, **profile)``: a tuning of ``scripted_factory(256, block=...)`` over
    ``configs`` with those profile arguments, its cache in the test's folder (block 32 is the
    factory's default config)."""

    def make(configs=SPACE, **profile):
        return TuningProblem(
            factory=scripted_factory,
            args=(256,),
            kwargs={},
            configs=list(configs),
            compile_args=CompileArgs(),
            profile_args=ProfileArgs(**profile),
            settings=Settings.from_env({"TILEAUTO_CACHE_DIR": str(tmp_path / "cache")}),
            verbose=False,
            name="k",
        )

    return make
