"""tileauto.space.constraints and expression: what a rule may say, and that it reads as Python."""

from __future__ import annotations

import itertools
import re

import pytest

from tileauto.errors import ConfigSpaceError
from tileauto.space import (
    product,
)


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

    from tileauto.space import _expression as expression

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
    from tileauto.space import _expression as expression

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
