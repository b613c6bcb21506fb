"""tileauto.space.resolve: configs= resolved and checked against the factory before anything compiles."""

from __future__ import annotations

import numpy as np
import pytest

from tileauto.errors import ConfigSpaceError
from tileauto.space import (
    ProductSpace,
    Space,
    config_id,
    full_config,
    product,
    resolve_configs,
    tunable_parameters,
)


def matmul(M, N, K, block_M=64, block_N=64, threads=128, dtype="float32"):
    raise AssertionError("resolve_configs must not call the factory")


def test_tunable_parameters_are_those_with_defaults():
    assert tunable_parameters(matmul) == {
        "block_M": 64,
        "block_N": 64,
        "threads": 128,
        "dtype": "float32",
    }


def test_list_of_dicts_is_copied():
    space = [{"block_M": 32}, {"block_M": 64, "threads": 256}]
    got = resolve_configs(space, matmul, (128, 128, 128), {})
    assert got == space
    got[0]["block_M"] = 1
    assert space[0]["block_M"] == 32


def test_any_iterable_of_dicts():
    got = resolve_configs(({"threads": t} for t in (64, 128)), matmul, (1, 2, 3), {})
    assert got == [{"threads": 64}, {"threads": 128}]


def test_empty_dict_is_the_default_config():
    assert resolve_configs([{}], matmul, (1, 2, 3), {}) == [{}]


@pytest.mark.parametrize("empty", [[], (), iter([])])
def test_empty_space(empty):
    with pytest.raises(ConfigSpaceError, match="empty"):
        resolve_configs(empty, matmul, (1, 2, 3), {})


def test_callable_returning_nothing_is_empty():
    with pytest.raises(ConfigSpaceError, match="empty"):
        resolve_configs(lambda *a, **k: [], matmul, (1, 2, 3), {})


def test_unknown_key_names_the_key_and_the_signature():
    with pytest.raises(ConfigSpaceError) as info:
        resolve_configs([{"block_M": 32}, {"blockM": 32}], matmul, (1, 2, 3), {})
    msg = str(info.value)
    assert "configs[1]" in msg and "['blockM']" in msg and "is not a parameter" in msg
    assert "matmul(M, N, K, block_M=64, block_N=64, threads=128, dtype='float32')" in msg


def test_several_unknown_keys():
    with pytest.raises(ConfigSpaceError, match=r"\['x', 'y'\], which are not"):
        resolve_configs([{"x": 1, "y": 2, "threads": 4}], matmul, (1, 2, 3), {})


@pytest.mark.parametrize("configs", [[{"block_M": 32}], product(block_M=[32, 64])])
def test_a_factory_with_kwargs_is_told_configs_set_named_parameters(configs):
    def gemm(M, N, K, **cfg):
        raise AssertionError("resolve_configs must not call the factory")

    with pytest.raises(ConfigSpaceError) as info:
        resolve_configs(configs, gemm, (1, 2, 3), {})
    msg = str(info.value)
    assert "['block_M']" in msg and "gemm(M, N, K, **cfg)" in msg
    assert "not its **cfg: give each tunable a parameter with a default" in msg
    with pytest.raises(ConfigSpaceError) as typo:  # a factory without **kwargs: no hint
        resolve_configs([{"blockM": 32}], matmul, (1, 2, 3), {})
    assert "not its **" not in str(typo.value)


@pytest.mark.parametrize("entry", [("block_M", 32), 32, "block_M", None, [("block_M", 32)]])
def test_non_dict_entry(entry):
    with pytest.raises(ConfigSpaceError, match=r"configs\[1\] must be a dict"):
        resolve_configs([{"threads": 64}, entry], matmul, (1, 2, 3), {})


@pytest.mark.parametrize("configs", [None, {"block_M": 32}, "block_M", 5])
def test_configs_that_are_not_a_list(configs):
    with pytest.raises(ConfigSpaceError, match="must be a list of dicts"):
        resolve_configs(configs, matmul, (1, 2, 3), {})


def test_callable_configs_get_the_call_arguments():
    seen = []

    def space(M, N, K, dtype="float32"):
        seen.append((M, N, K, dtype))
        return [{"block_M": b} for b in (16, 32) if b <= M]

    got = resolve_configs(space, matmul, (16, 8, 4), {"dtype": "float16"})
    assert seen == [(16, 8, 4, "float16")]
    assert got == [{"block_M": 16}]


def test_callable_configs_may_return_a_generator():
    got = resolve_configs(lambda *a: ({"threads": t} for t in (32, 64)), matmul, (1, 2, 3), {})
    assert got == [{"threads": 32}, {"threads": 64}]


def test_callable_configs_with_the_wrong_signature():
    with pytest.raises(
        ConfigSpaceError,
        match="cannot take the kernel.s arguments \\(1, 2, 3\\).*factory.s problem arguments",
    ):
        resolve_configs(lambda: [{"threads": 32}], matmul, (1, 2, 3), {})


def test_callable_configs_are_checked_too():
    with pytest.raises(ConfigSpaceError, match="'nope'"):
        resolve_configs(lambda *a: [{"nope": 1}], matmul, (1, 2, 3), {})


def test_a_config_listed_twice_keeps_its_place_when_nothing_is_fixed():
    # collapsing shifted every later config: the report's # and an error's [2] said [1], a
    # good config of the user's list
    space = [{"block_M": 16}, {"block_M": 16}, {"block_M": 3}]
    assert resolve_configs(space, matmul, (1, 2, 3), {}) == space
    assert resolve_configs(space, matmul, (1, 2, 3), {"threads": 64}) == space  # not tuned here


def test_an_explicit_keyword_fixes_that_tunable_and_the_configs_collapse():
    space = [
        {"threads": 64, "block_M": 32},
        {"threads": 128, "block_M": 32},
        {"threads": 128, "block_M": 64},
    ]
    got = resolve_configs(space, matmul, (1, 2, 3), {"threads": 32})
    assert got == [{"block_M": 32}, {"block_M": 64}]  # distinct remainders, in order


def test_an_explicit_positional_argument_fixes_that_tunable():
    got = resolve_configs([{"block_M": 32}, {"block_M": 64}], matmul, (1, 2, 3, 16), {})
    assert got == [{}]  # every config collapses to the default of the rest


def test_config_id_is_stable_and_order_free():
    assert config_id({"b": 1, "a": 2}) == config_id({"a": 2, "b": 1}) == '{"a": 2, "b": 1}'
    assert config_id({"a": 1}) != config_id({"a": 2})
    assert config_id({"t": (1, 2)}) == '{"t": [1, 2]}'
    assert "object" in config_id({"o": object()})  # not JSON: falls back to repr


def test_full_config_fills_defaults():
    defaults = tunable_parameters(matmul)
    assert full_config({"threads": 32}, defaults, ["threads", "block_M"]) == {
        "block_M": 64,
        "threads": 32,
    }
    assert list(full_config({}, defaults, ["threads", "block_M"])) == ["block_M", "threads"]


def _helper(x):
    return x


class _Thing:
    pass


@pytest.mark.parametrize(
    "value, what",
    [(_helper, "a function"), (_Thing(), "an object"), ([1, _helper], "a function")],
)
def test_config_values_that_cannot_round_trip_are_rejected_with_the_fix(value, what):
    with pytest.raises(
        ConfigSpaceError, match=rf"configs\[0\]\['block_M'\] is {what}.*pass a name"
    ):
        resolve_configs([{"block_M": value}], matmul, (16, 16, 16), {})


def test_numpy_config_values_become_python_numbers():

    (cfg,) = resolve_configs([{"block_M": np.int64(64)}], matmul, (16, 16, 16), {})
    assert cfg == {"block_M": 64} and type(cfg["block_M"]) is int
    # numpy's bool is no numbers.Number: it was refused as "an object (numpy.bool)"
    (cfg,) = resolve_configs([{"block_M": np.bool_(True)}], matmul, (16, 16, 16), {})
    assert type(cfg["block_M"]) is bool


def test_a_generator_is_read_once_into_a_list():
    from tileauto.space import materialize

    gen = ({"block_M": b} for b in (1, 2))
    configs = materialize(gen)
    for _ in range(2):
        assert resolve_configs(configs, matmul, (16, 16, 16), {}) == [
            {"block_M": 1},
            {"block_M": 2},
        ]
    same = [{"block_M": 1}]
    assert materialize(same) is same


def test_iterating_a_space_gives_dicts_that_resolve_configs_takes():
    space = product(block_M=[32, 64], block_N=[64])
    assert resolve_configs(list(space), matmul, (1, 2, 3), {}) == [
        {"block_M": 32, "block_N": 64},
        {"block_M": 64, "block_N": 64},
    ]
    assert isinstance(space, ProductSpace) and isinstance(space, Space)


def test_resolve_configs_keeps_a_product_lazy_and_checks_its_names():
    space = product(block_M=[32, 64], block_N=[64])
    assert resolve_configs(space, matmul, (1, 2, 3), {}) is space  # never expanded
    with pytest.raises(ConfigSpaceError, match=r"\['tile'\], which is not a parameter"):
        resolve_configs(product(tile=[1, 2]), matmul, (1, 2, 3), {})
    with pytest.raises(ConfigSpaceError, match="pruned every config"):
        resolve_configs(space.where("block_M > 64"), matmul, (1, 2, 3), {})
    # a tunable the call passes is fixed: the product without it, still lazy
    fixed = resolve_configs(space, matmul, (1, 2, 3), {"block_M": 32})
    assert isinstance(fixed, ProductSpace) and [fixed.config(i) for i in range(len(fixed))] == [
        {"block_N": 64}
    ]


def test_a_fixed_tunable_keeps_a_huge_product_lazy_and_its_constraints_read_the_call():
    """``f(..., block_M=64)`` expanded a product into a list of dicts: a product of 2e6
    configs took 144 s and 2.5 GiB (10^8 would not fit), and its constraints were read over
    the product's own block_M values (the remainders of every valid config), not the call's."""
    big = product(
        block_M=[16 * i for i in range(1, 2001)],
        block_N=[16 * i for i in range(1, 1001)],
        constraints=["block_N <= block_M"],
    )
    fixed = resolve_configs(big, matmul, (1, 2, 3), {"block_M": 64})
    assert isinstance(fixed, ProductSpace) and fixed.names == ("block_N",)
    assert [fixed.config(i)["block_N"] for i in range(len(fixed))] == [16, 32, 48, 64]
    # positional too; a value no expression constant holds, and a callable constraint: expanded
    assert len(resolve_configs(big, matmul, (1, 2, 3, 32), {})) == 2
    small = product(block_M=[32, 64], block_N=[64, 128], constraints=["block_N >= block_M"])
    assert resolve_configs(small, matmul, (1, 2, 3), {"block_M": (1, 2)}) == [
        {"block_N": 64},
        {"block_N": 128},
    ]
    calls = product(block_M=[32, 64], block_N=[64, 128], constraints=[lambda c: True])
    assert isinstance(resolve_configs(calls, matmul, (1, 2, 3), {"block_M": 32}), list)
    with pytest.raises(ConfigSpaceError, match="pruned every config"):
        resolve_configs(small, matmul, (1, 2, 3), {"block_M": 256})  # no block_N >= 256
