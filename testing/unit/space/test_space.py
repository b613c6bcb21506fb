"""Tests of tileauto.space: resolving and checking the tuning space before anything compiles."""

from __future__ import annotations

import pytest

from tileauto.errors import ConfigSpaceError
from tileauto.space import config_id, full_config, resolve_configs, tunable_parameters


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
    with pytest.raises(ConfigSpaceError, match="same arguments as the factory"):
        resolve_configs(lambda: [{"threads": 32}], matmul, (1, 2, 3), {})


def test_callable_configs_are_checked_too():
    with pytest.raises(ConfigSpaceError, match="'nope'"):
        resolve_configs(lambda *a: [{"nope": 1}], matmul, (1, 2, 3), {})


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
    import numpy as np

    (cfg,) = resolve_configs([{"block_M": np.int64(64)}], matmul, (16, 16, 16), {})
    assert cfg == {"block_M": 64} and type(cfg["block_M"]) is int


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


# -- Triton's prune_configs_by --------------------------------------------------------------------
from tileauto.space import check_prune_configs_by, prune_space  # noqa: E402

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


# -- the space builder ----------------------------------------------------------------------------

import itertools  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402

from tileauto.space import (  # noqa: E402
    ListSpace,
    Param,
    ProductSpace,
    Space,
    as_space,
    product,
)


def test_a_product_is_every_combination_in_itertools_order():
    space = product(block_M=[32, 64], block_N=[16, 32, 64], layout=["row", "col"])
    expected = [
        {"block_M": m, "block_N": n, "layout": lay}
        for m, n, lay in itertools.product([32, 64], [16, 32, 64], ["row", "col"])
    ]
    assert len(space) == 12 and list(space) == expected
    assert space[0] == expected[0] and space[-1] == expected[-1]
    assert [space.config(i) for i in range(12)] == expected
    with pytest.raises(IndexError):
        space[12]


def test_a_product_is_lazy_indexing_without_expanding():
    # 10^12 configs: len and indexing decode an index, nothing is listed
    space = product(**{f"p{k}": list(range(10)) for k in range(12)})
    assert len(space) == 10**12
    assert space[123_456_789_012] == {f"p{k}": int(d) for k, d in enumerate("000123456789012"[3:])}


def test_expression_and_callable_constraints_and_what_each_pruned():
    space = product(
        block_M=[32, 64, 128],
        micro_M=[3, 4, 8],
        layout=["row", "col"],
        constraints=[
            "block_M % micro_M == 0",
            lambda c: c["layout"] == "row" or c["block_M"] > 32,
        ],
    )
    expected = [
        c
        for c in (
            {"block_M": m, "micro_M": u, "layout": lay}
            for m, u, lay in itertools.product([32, 64, 128], [3, 4, 8], ["row", "col"])
        )
        if c["block_M"] % c["micro_M"] == 0 and (c["layout"] == "row" or c["block_M"] > 32)
    ]
    assert list(space) == expected
    assert space.pruned == {"block_M % micro_M == 0": 6, "<lambda>": 2}
    twice = product(a=[1, 2, 3], constraints=[lambda c: c["a"] > 1, lambda c: c["a"] > 2])
    assert twice.pruned == {"<lambda>": 1, "<lambda> #2": 1}
    assert sum(space.pruned.values()) + len(space) == space.product_size


@pytest.mark.parametrize(
    "rule, kept",
    [
        ("a < b", [(1, 2), (1, 4), (2, 4)]),
        ("a * 2 == b or a == 4", [(1, 2), (2, 4), (4, 2), (4, 4)]),
        ("not a >= 2", [(1, 2), (1, 4)]),
        ("a in (1, 4) and b != 2", [(1, 4), (4, 4)]),
        ("a not in [1, 4]", [(2, 2), (2, 4)]),
        ("1 < a <= 2", [(2, 2), (2, 4)]),
        ("b // a == 2", [(1, 2), (2, 4)]),
        ("a ** 2 == b * 2 - 2 * 0", [(2, 2)]),
        ("-a + b > 1", [(1, 4), (2, 4)]),
        ("b / a == 1.0", [(2, 2), (4, 4)]),
    ],
)
def test_constraint_expressions_read_as_python(rule, kept):
    space = product(a=[1, 2, 4], b=[2, 4], constraints=rule)
    assert [(c["a"], c["b"]) for c in space] == kept


def test_a_division_by_zero_makes_its_comparison_false_as_a_guard_would():
    space = product(a=[0, 1, 2, 3], b=[0, 2], constraints="b != 0 and a % b == 0")
    assert list(space) == [{"a": 0, "b": 2}, {"a": 2, "b": 2}]
    assert list(product(a=[1, 2], b=[0, 1], constraints="a / b > 0")) == [
        {"a": 1, "b": 1},
        {"a": 2, "b": 1},
    ]


def test_strings_and_bools_in_constraints():
    space = product(
        layout=["row", "col"], swizzle=[False, True], constraints="swizzle or layout == 'row'"
    )
    assert list(space) == [
        {"layout": "row", "swizzle": False},
        {"layout": "row", "swizzle": True},
        {"layout": "col", "swizzle": True},
    ]


@pytest.mark.parametrize(
    "rule, says",
    [
        ("__import__('os').system('true')", "Call"),
        ("a.real > 0", "Attribute"),
        ("a[0] > 1", "Subscript"),
        ("(lambda: 1)()", "Call"),
        ("a if a else 1", "IfExp"),
        ("[x for x in (1, 2)]", "ListComp"),
        ("z > 1", "'z', which is not a parameter"),
        ("a in b", "'in' takes a list of constants"),
        ("a +", "not an expression"),
        ("a := 1", "not an expression"),
    ],
)
def test_unsafe_or_bad_expressions_are_refused_before_anything_runs(rule, says):
    with pytest.raises(ConfigSpaceError, match=re_escape(says)):
        product(a=[1, 2], b=[1], constraints=[rule])


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_constraint_that_raises_names_itself_and_the_config():
    def picky(config):
        raise KeyError("block_K")

    with pytest.raises(ConfigSpaceError, match="picky raised KeyError"):
        len(product(a=[1, 2], constraints=[picky]))


def test_tied_parameters_move_together():
    space = product(
        Param.of("micro_M, micro_N", [(4, 16), (8, 32)]),
        block_K=[16, 32],
        constraints="micro_N > block_K",
    )
    assert list(space) == [{"micro_M": 8, "micro_N": 32, "block_K": 16}]
    assert space.pruned == {"micro_N > block_K": 3}
    assert space.names == ("micro_M", "micro_N", "block_K")


@pytest.mark.parametrize(
    "name, values, says",
    [
        ("block_M", [], "no values"),
        ("block_M", [32, 32], "repeats a value"),
        ("block M", [1], "identifier"),
        ("micro_M, micro_N", [(4, 16), 8], "tuple of 2"),
        ("block_M", [object()], "plain data"),
        ("block_M", "64", "list of values"),
    ],
)
def test_bad_parameters_are_named(name, values, says):
    with pytest.raises(ConfigSpaceError, match=says):
        Param.of(name, values)


def test_spaces_compose_by_product_and_by_more_constraints():
    tiles = product(block_M=[32, 64], constraints="block_M > 32")
    threads = product(threads=[128, 256])
    both = tiles * threads
    assert list(both) == [{"block_M": 64, "threads": 128}, {"block_M": 64, "threads": 256}]
    narrower = both.where("threads == 256")
    assert list(narrower) == [{"block_M": 64, "threads": 256}]
    assert narrower.pruned == {"block_M > 32": 2, "threads == 256": 1}
    with pytest.raises(ConfigSpaceError, match="more than once"):
        tiles * product(block_M=[1])


def test_codes_and_index_of_round_trip_and_miss_outside_the_space():
    space = product(a=[1, 2, 3], b=[10, 20], constraints="a + b != 12")
    codes = space.codes(np.arange(len(space)))
    assert space.index_of(codes).tolist() == list(range(len(space)))
    assert space.index_of([[1, 0]]).tolist() == [-1]  # a=2, b=10 was pruned
    assert space.index_of([[5, 0], [-1, 0]]).tolist() == [-1, -1]
    plain = product(a=[1, 2, 3], b=[10, 20])
    assert plain.index_of(plain.codes([4])).tolist() == [4]


def test_a_constrained_product_too_large_to_scan_is_refused_with_the_fix():
    with pytest.raises(ConfigSpaceError, match="tie parameters"):
        product(**{f"p{k}": list(range(10)) for k in range(9)}, constraints="p0 > 1")


def test_a_million_configs_are_indexed_without_a_dict_each():
    space = product(
        **{name: list(range(10)) for name in "abcdef"},
        constraints=["a % 2 == 0", "b + c < 12"],
    )
    assert len(space) == 500_000 * 72 // 100  # b + c >= 12 for 28 of the 100 (b, c)
    assert space._valid is not None and space._valid.nbytes == len(space) * 2
    assert space[0] == dict.fromkeys("abcdef", 0)


def test_a_constrained_scan_keeps_two_bytes_per_valid_config():
    import tracemalloc

    # 2^22 combinations, 7/8 of them valid: 8 bytes each were 29 MiB kept and 58 MiB at peak
    space = product(**{f"p{k}": list(range(8)) for k in range(7)}, q=[0, 1], constraints="p0 != 3")
    tracemalloc.start()
    try:
        assert len(space) == 7 * 8**6 * 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20
    # indexing, decoding and finding configs agree with the product's order, across chunks
    expected = [i for i in range(8**7 * 2) if (i // (8**6 * 2)) != 3]
    picks = np.asarray([0, 1, 65_535, 65_536, 400_000, 1_234_567, len(space) - 1])
    codes = space.codes(picks)
    assert (space.index_of(codes) == picks).all()
    for i in picks.tolist():
        position = expected[i]
        assert space[i] == {**{f"p{k}": position // (8 ** (6 - k) * 2) % 8 for k in range(7)},
                            "q": position % 2}  # fmt: skip
    assert space.index_of([[3, 0, 0, 0, 0, 0, 0, 1]]).tolist() == [-1]


def test_a_list_of_configs_is_a_space_with_values_inferred():
    configs = [{"block_M": 64, "layout": "row"}, {"block_M": 32}, {"block_M": 128, "layout": "col"}]
    space = Space.from_configs(configs)
    assert isinstance(space, ListSpace) and list(space) == configs and len(space) == 3
    by_name = {p.name: p for p in space.params}
    assert by_name["block_M"].values == (32, 64, 128) and by_name["block_M"].ordered
    assert by_name["layout"].values[:2] == ("row", "col") and not by_name["layout"].ordered
    assert space.index_of(space.codes([2, 0, 1])).tolist() == [2, 0, 1]
    assert as_space(space) is space and list(as_space(configs)) == configs


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
    # a tunable the call passes is fixed: the product is expanded, each remainder once
    fixed = resolve_configs(space, matmul, (1, 2, 3), {"block_M": 32})
    assert fixed == [{"block_N": 64}]


def test_find_is_the_inverse_of_config():
    space = product(
        Param.of("micro_M, micro_N", [(4, 16), (8, 32)]),
        block_M=[32, 64, 128],
        layout=["row", "col"],
        constraints=["block_M % micro_M == 0", "block_M > 32 or layout == 'row'"],
    )
    for i in range(len(space)):
        assert space.find(space[i]) == i
        assert space.find({**space[i], "other": 1}) == i  # other keys are ignored
    assert space.find({"micro_M": 4, "micro_N": 32, "block_M": 64, "layout": "row"}) == -1
    assert space.find({"micro_M": 4, "micro_N": 16, "block_M": 32, "layout": "col"}) == -1
    assert space.find({"micro_M": 4, "micro_N": 16, "block_M": 64}) == -1  # a key missing
    listed = Space.from_configs([{"a": 1}, {"a": 2, "b": "x"}])
    assert [listed.find(c) for c in listed] == [0, 1]


# -- constraint expressions evaluate as Python does -----------------------------------------------

VALUES = {
    "a": [0, 1, -3, 7, 2**31],  # int64, but a * a * a is not
    "b": [2, -5, 0, 2**53 + 1, 2**70],  # beyond float64's integers and beyond int64
    "c": [0, 1, -2, 6, 12],  # small ints: numpy computes these
    "x": [0.5, -2.25, 0.0, 1e300],
    "s": ["", "row", "col"],
    "f": [False, True],
}
LITERALS = ["0", "1", "2", "3", "1099511627776", "9223372036854775807", "0.5", "'row'", "''"]
CONSTANTS = [*LITERALS, "-1", "2 ** 40", "True"]


def random_expression(rng, depth: int) -> str:
    """A constraint expression of the language: names, constants, arithmetic, comparisons,
    ``in`` lists, and/or/not."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([*VALUES, *VALUES, *CONSTANTS])
    kind = rng.choice(["arith", "arith", "compare", "compare", "chain", "in", "bool", "not"])
    sub = lambda: random_expression(rng, depth - 1)  # noqa: E731
    if kind == "arith":
        op = rng.choice(["+", "-", "*", "/", "//", "%", "**", "-"])
        right = rng.choice(["0", "1", "2", "3", "-1", "c"]) if op == "**" else sub()
        return f"({sub()} {op} {right})"
    if kind == "compare":
        return f"({sub()} {rng.choice(['==', '!=', '<', '<=', '>', '>='])} {sub()})"
    if kind == "chain":
        return f"({sub()} < {sub()} <= {sub()})"
    if kind == "in":
        items = ", ".join(rng.sample([*LITERALS, "True"], 3))
        return f"({sub()} {rng.choice(['in', 'not in'])} [{items}])"
    if kind == "bool":
        return f"({sub()} {rng.choice(['and', 'or'])} {sub()})"
    return f"(not {sub()})"


def python_keeps(text: str, names: list[str]) -> list[dict] | None:
    """The configs Python keeps (a division by zero prunes); None when Python raises else."""
    code = compile(text, "<constraint>", "eval")
    kept = []
    for combo in itertools.product(*(VALUES[n] for n in names)):
        config = dict(zip(names, combo))
        try:
            if eval(code, {"__builtins__": {}}, dict(config)):
                kept.append(config)
        except ZeroDivisionError:
            pass
        except Exception:
            return None
    return kept


def checked_by_tileauto(text: str, names: list[str]) -> list[dict] | None:
    try:
        return list(product(**{n: VALUES[n] for n in names}, constraints=text))
    except ConfigSpaceError as exc:
        assert "cannot be evaluated for" in str(exc) and text.strip() in str(exc)
        return None


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("numpy_path", [True, False], ids=["as_chosen", "python_only"])
def test_constraint_expressions_equal_python_on_every_config(seed, numpy_path, monkeypatch):
    import random

    from tileauto.space import expression

    def unsafe(*args, **kwargs):
        raise expression._Unsafe("every expression by Python")

    if not numpy_path:
        monkeypatch.setattr(expression, "_kind", unsafe)
    rng = random.Random(seed)
    for _ in range(60):
        text = random_expression(rng, 3)
        names = [n for n in VALUES if re.search(rf"\b{n}\b", text.replace("'row'", ""))]
        if not names:
            continue
        assert checked_by_tileauto(text, names) == python_keeps(text, names), text


def test_the_issues_examples_are_read_as_python():
    assert len(product(a=[2**31, -(2**31)], constraints="a * a * a > 0")) == 1
    assert list(product(a=[2**53 + 1, 2**53], constraints="a % 3 == 0")) == [{"a": 2**53 + 1}]
    assert list(product(a=[2**53 + 1], b=[3], constraints="a // b * b == a")) == [
        {"a": 2**53 + 1, "b": 3}
    ]
    assert list(product(layout=["", "row"], constraints="not layout")) == [{"layout": ""}]
    assert list(product(layout=["row", "col"], constraints="layout > 'd'")) == [{"layout": "row"}]
    with pytest.raises(
        ConfigSpaceError, match="constraint 'layout > 1' cannot be evaluated"
    ) as info:
        product(layout=["row", "col"], constraints="layout > 1")  # at product(), not at len()
    assert "TypeError" in str(info.value) and "'layout': 'row'" in str(info.value)


def test_a_zero_division_python_would_raise_prunes_the_config():
    # Python raises for b == 0 whatever 'not' makes of it: the config is pruned
    space = product(a=[1, 2], b=[0, 1], constraints="not (a % b == 1)")
    assert list(space) == [{"a": 1, "b": 1}, {"a": 2, "b": 1}]


def test_numbers_and_strings_that_numpy_computes_exactly_are_not_evaluated_one_by_one(
    monkeypatch,
):
    from tileauto.space import expression

    def one_by_one(tree, env):
        raise AssertionError(f"evaluated by Python for {env}")

    space = product(
        block_M=[16, 32, 64, 128],
        micro_M=[0, 4, 8],
        scale=[0.5, 1.5],
        layout=["row", "col", ""],
        swizzle=[False, True],
        constraints=[
            "micro_M != 0 and block_M % micro_M == 0",
            "block_M * scale / 2 <= 48 or swizzle",
            "layout in ['row', 'col'] and not (layout == 'col' and block_M > 64)",
        ],
    )
    monkeypatch.setattr(expression, "python_truth", one_by_one)
    assert len(space) == sum(
        1
        for m, u, sc, lay, sw in itertools.product(
            [16, 32, 64, 128], [0, 4, 8], [0.5, 1.5], ["row", "col", ""], [False, True]
        )
        if u != 0
        and m % u == 0
        and (m * sc / 2 <= 48 or sw)
        and lay in ["row", "col"]
        and not (lay == "col" and m > 64)
    )
