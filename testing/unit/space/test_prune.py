"""tileauto.space.prune: Triton's prune_configs_by, checked at the call and applied."""

from __future__ import annotations

import pytest

from tileauto.errors import ConfigSpaceError
from tileauto.space import (
    check_prune_configs_by,
    prune_space,
)


def matmul(M, N, K, block_M=64, block_N=64, threads=128, dtype="float32"):
    raise AssertionError("resolve_configs must not call the factory")


SPACE = [{"block_M": b} for b in (16, 32, 64, 128)]


def test_early_prune_then_perf_model_top_k():
    seen = {}

    def early(configs, named_args, **kwargs):
        seen["named"] = named_args
        return [c for c in configs if c["block_M"] != 16]

    prune = {
        "early_config_prune": early,
        "perf_model": lambda M, N, K, block_M, **rest: abs(block_M - 64),
        "top_k": 2,
    }
    kept = prune_space(SPACE, prune, matmul, (128, 128, 128), {})
    assert kept == [{"block_M": 64}, {"block_M": 32}]  # ranked by the model, best first
    assert seen["named"] == {"M": 128, "N": 128, "K": 128}


@pytest.mark.parametrize("top_k, n", [(0.5, 2), (0.01, 1), (1.0, 4)])
def test_fractional_top_k_is_a_share_of_the_space_and_keeps_one(top_k, n):
    prune = {"perf_model": lambda **kw: kw["block_M"], "top_k": top_k}
    assert len(prune_space(SPACE, prune, matmul, (1, 2, 3), {})) == n


@pytest.mark.parametrize("top_k, n", [(0.5, 1), (0.34, 1), (1.0, 2)])
def test_fractional_top_k_is_a_share_of_what_the_early_prune_kept(top_k, n):
    # Triton's rule: the share is taken of the early prune's list, not of the whole space
    prune = {
        "early_config_prune": lambda configs, named_args: configs[:2],
        "perf_model": lambda **kw: kw["block_M"],
        "top_k": top_k,
    }
    kept = prune_space(SPACE, prune, matmul, (1, 2, 3), {})
    assert kept == [{"block_M": 16}, {"block_M": 32}][:n]


def test_early_prune_gets_the_positional_arguments_as_named_args_as_triton_does():
    seen = {}

    def early(configs, named_args, **kwargs):
        seen["named"], seen["kwargs"] = named_args, kwargs
        return configs

    def model(**everything):
        seen.setdefault("model", everything)
        return everything["block_M"]

    prune = {"early_config_prune": early, "perf_model": model, "top_k": 2}
    prune_space(SPACE, prune, matmul, (128,), {"N": 64, "K": 32})
    assert seen["named"] == {"M": 128}  # the keyword arguments come apart, as **kwargs
    assert seen["kwargs"] == {"N": 64, "K": 32}
    assert seen["model"] == {"M": 128, "N": 64, "K": 32, "block_M": 16}  # the model gets all


def test_prune_that_invents_or_empties_configs_is_an_error():
    with pytest.raises(ConfigSpaceError, match="not in the space"):
        prune_space(
            SPACE, {"early_config_prune": lambda c, n: [{"block_M": 7}]}, matmul, (1, 2, 3), {}
        )
    with pytest.raises(ConfigSpaceError, match="left no config"):
        prune_space(SPACE, {"early_config_prune": lambda c, n: []}, matmul, (1, 2, 3), {})


@pytest.mark.parametrize(
    "prune, match",
    [
        ({"early_config_prune": lambda c, n: None}, r"\['early_config_prune'\] must return a list"),
        ({"early_config_prune": lambda c, n: [64]}, r"its list holds int 64"),
        ({"perf_model": lambda **kw: "fast", "top_k": 1}, r"\['perf_model'\] must return .*'fast'"),
    ],
)
def test_prune_functions_that_return_the_wrong_thing_are_named(prune, match):
    with pytest.raises(ConfigSpaceError, match=match):
        prune_space(SPACE, prune, matmul, (1, 2, 3), {})


@pytest.mark.parametrize(
    "prune, match",
    [
        ({"perf_model": len}, r"top_k.*int >= 1 or a fraction"),
        ({"perf_model": len, "top_k": 0}, r"top_k"),
        ({"perf_model": len, "top_k": 1.5}, r"top_k"),
        ({"early_prune": len}, r"unknown keys \['early_prune'\]"),
        ({"perf_model": 3, "top_k": 1}, r"\['perf_model'\] must be callable"),
        ([len], "must be a dict"),
    ],
)
def test_bad_prune_configs_by_is_named(prune, match):
    with pytest.raises(ValueError, match=match):
        check_prune_configs_by(prune)


def test_a_perf_model_estimate_of_nan_is_refused():
    prune = {"perf_model": lambda **kw: float("nan"), "top_k": 2}
    with pytest.raises(ConfigSpaceError, match="must return an estimated time.*got nan"):
        prune_space(SPACE, prune, matmul, (1, 2, 3), {})
