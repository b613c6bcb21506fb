"""Constraint expressions, evaluated as Python evaluates them, over arrays of configs.

A constraint such as ``"block_M % micro_M == 0"`` is checked over a whole product at once.
numpy computes it when its result is provably the one Python gives for every row: ints that
cannot leave int64, ints mixed with floats only where float64 holds them exactly, strings
compared with strings; anything else (huge ints, mixed types, ``a or b`` used as a value,
``**`` of floats) is evaluated by Python itself, once per distinct combination of the values
the expression reads. A division or modulo by zero, where Python would raise
``ZeroDivisionError``, prunes the config; any other error Python would raise is a
:class:`PythonError`, which the space reports naming the constraint and the config.

numpy is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import ast
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from numpy.typing import NDArray

BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}

_INT64 = (1 << 63) - 1
_EXACT_FLOAT_INT = 1 << 53  # ints up to this magnitude convert to float64 exactly
_MAX_BITS = 1 << 20  # a power or repetition beyond this size is refused, not computed
_CACHE_LIMIT = 1 << 16  # Python results kept across chunks, per constraint


def keep(tree: ast.expr, columns: dict[str, NDArray[Any]], n: int, cache: dict) -> NDArray[Any]:
    """Whether Python's ``bool(expression)`` is true for each of ``n`` rows (a row whose
    evaluation divides by zero is not kept).

    Raises:
        PythonError: Python raises something else than ZeroDivisionError for a row.
    """
    np = _numpy()
    try:
        _kind(tree, columns, truth=True)
    except _Unsafe:
        return _keep_by_python(tree, columns, n, cache)
    with np.errstate(all="ignore"):
        value, error = _fast(tree, columns)
        kept = _truth(value) & ~error
    return np.broadcast_to(np.asarray(kept, dtype=bool), (n,)).copy()


def probe(tree: ast.expr, groups: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Evaluate the expression in Python on one config per combination of value types.

    ``groups`` holds, per parameter, the config entries its values give; an error Python
    raises for a type (``"row" > 1``) then shows at ``product()``, not at the first scan.

    Raises:
        PythonError: Python raised something other than ZeroDivisionError.
    """
    names = {sub.id for sub in ast.walk(tree) if isinstance(sub, ast.Name)}
    choices = []
    for entries in groups:
        if not names & {k for e in entries for k in e}:
            continue
        by_type: dict[tuple, dict[str, Any]] = {}
        for entry in entries:
            by_type.setdefault(tuple(type(entry.get(k)) for k in sorted(names & set(entry))), entry)
        choices.append(list(by_type.values()))
    for combo in itertools.islice(itertools.product(*choices), 4096):
        env: dict[str, Any] = {}
        for entry in combo:
            env.update(entry)
        python_truth(tree, env)


class PythonError(Exception):
    """Python raised evaluating a constraint for one config (not a division by zero)."""

    def __init__(self, env: dict[str, Any], error: Exception):
        super().__init__(f"for {env!r}: {type(error).__name__}: {error}")
        self.env, self.error = env, error


def python_truth(tree: ast.expr, env: dict[str, Any]) -> bool:
    """``bool(expression)`` for one config, computed by Python; False on a division by zero.

    Raises:
        PythonError: Python raised anything else.
    """
    try:
        return bool(_python(tree, env))
    except ZeroDivisionError:
        return False
    except Exception as exc:
        raise PythonError(dict(env), exc) from None


def _python(node: ast.expr, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp):
        value = _python(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not value
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BoolOp):
        result: Any = None
        for part in node.values:  # short-circuits and returns an operand, as Python does
            result = _python(part, env)
            if bool(result) != isinstance(node.op, ast.And):
                return result
        return result
    if isinstance(node, ast.BinOp):
        left, right = _python(node.left, env), _python(node.right, env)
        _check_size(node.op, left, right)
        return BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _python(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            right = _python(comparator, env)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_python(e, env) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    raise ValueError(f"unexpected {type(node).__name__} in a constraint")  # checked before


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse a power or a repetition too large to compute (Python would try for minutes)."""
    if isinstance(op, ast.Pow) and isinstance(left, int) and isinstance(right, int):
        if right > 0 and abs(left) > 1 and right * abs(left).bit_length() > _MAX_BITS:
            raise OverflowError(f"{left} ** {right} has more than {_MAX_BITS} bits")
    if isinstance(op, ast.Mult):
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                if len(seq) * times > _MAX_BITS:
                    raise OverflowError(f"a repetition of {len(seq) * times} items")


def _keep_by_python(
    tree: ast.expr, columns: dict[str, NDArray[Any]], n: int, cache: dict
) -> NDArray[Any]:
    """Python's result for each distinct combination of the values the expression reads."""
    np = _numpy()
    names = sorted({sub.id for sub in ast.walk(tree) if isinstance(sub, ast.Name)})
    key = np.zeros(n, dtype=np.int64)
    codes, values = [], []
    for name in names:
        code, uniques = _codes(np.broadcast_to(columns[name], (n,)))
        codes.append(code)
        values.append(uniques)
        key = key * len(uniques) + code
        key = np.unique(key, return_inverse=True)[1].reshape(-1)  # compact: never overflows
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    results = np.empty(len(first), dtype=bool)
    for k, row in enumerate(first.tolist()):
        env = {name: uniques[code[row]] for name, code, uniques in zip(names, codes, values)}
        token = tuple((type(v), _hashable(v)) for v in env.values())
        if token not in cache:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[token] = python_truth(tree, env)
        results[k] = cache[token]
    return results[inverse.reshape(-1)]


def _codes(column: NDArray[Any]) -> tuple[NDArray[Any], list[Any]]:
    """Each row's position among the column's distinct values, and those values (Python's)."""
    np = _numpy()
    if column.dtype != object:
        uniques, inverse = np.unique(column, return_inverse=True)
        return inverse.reshape(-1), uniques.tolist()
    seen: dict[Any, int] = {}
    found: list[Any] = []
    codes = np.empty(len(column), dtype=np.int64)
    for i, v in enumerate(column.tolist()):
        token = (type(v), _hashable(v))
        code = seen.get(token)
        if code is None:
            code = seen[token] = len(found)
            found.append(v)
        codes[i] = code
    return codes, found


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple((type(v), _hashable(v)) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, (type(v), _hashable(v))) for k, v in value.items()))
    if isinstance(value, float) and value != value:
        return "nan"  # NaN is not equal to itself, but is one value here
    return value


# -- the numpy evaluation, where it is exact --------------------------------------------------


class _Unsafe(Exception):
    """numpy would not compute what Python computes for this expression and these values."""


@dataclass(frozen=True)
class _Kind:
    """What a node evaluates to for every row: bool, int (within lo..hi), float or str."""

    kind: str
    lo: int = 0
    hi: int = 0


def _kind(node: ast.expr, columns: dict[str, NDArray[Any]], truth: bool = False) -> _Kind:
    """The node's kind, or _Unsafe where numpy's result could differ from Python's.

    ``truth``: only the node's truth value is used (the root, an operand of and/or/not).
    """
    if isinstance(node, ast.Name):
        return _column_kind(columns[node.id])
    if isinstance(node, ast.Constant):
        return _value_kind(node.value)
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not):
            _kind(node.operand, columns, truth=True)
            return _Kind("bool", 0, 1)
        inner = _number(_kind(node.operand, columns))
        if inner.kind == "float" or isinstance(node.op, ast.UAdd):
            return inner
        return _bounded(-inner.hi, -inner.lo)
    if isinstance(node, ast.BoolOp):
        if not truth:
            raise _Unsafe("and/or used as a value: Python gives one of its operands")
        for part in node.values:
            _kind(part, columns, truth=True)
        return _Kind("bool", 0, 1)
    if isinstance(node, ast.BinOp):
        return _binary_kind(
            node.op, _number(_kind(node.left, columns)), _number(_kind(node.right, columns))
        )
    if isinstance(node, ast.Compare):
        left = _kind(node.left, columns)
        for op, comparator in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                assert isinstance(comparator, (ast.List, ast.Tuple, ast.Set))
                if comparator is not node.comparators[-1]:
                    raise _Unsafe("a chain that goes on after 'in' compares with the list")
                for e in comparator.elts:
                    assert isinstance(e, ast.Constant)
                    if _comparable(left, e.value):
                        _compared(left, _value_kind(e.value))
                continue
            right = _kind(comparator, columns)
            _compared(left, right)
            left = right
        return _Kind("bool", 0, 1)
    raise _Unsafe(type(node).__name__)


def _column_kind(column: NDArray[Any]) -> _Kind:
    np = _numpy()
    kind = column.dtype.kind
    if kind == "b":
        return _Kind("bool", 0, 1)
    if kind == "i":
        if column.size == 0:
            return _Kind("int")
        return _Kind("int", int(np.min(column)), int(np.max(column)))
    if kind == "f":
        return _Kind("float")
    if kind == "U":
        return _Kind("str")
    raise _Unsafe(f"values of dtype {column.dtype}")


def _value_kind(value: Any) -> _Kind:
    if isinstance(value, bool):
        return _Kind("bool", 0, 1)
    if isinstance(value, int):
        return _bounded(value, value)
    if isinstance(value, float):
        return _Kind("float")
    if isinstance(value, str) and not value.endswith("\0"):
        return _Kind("str")
    raise _Unsafe(f"a constant {value!r}")


def _bounded(lo: int, hi: int) -> _Kind:
    if lo < -_INT64 or hi > _INT64:
        raise _Unsafe("an int beyond int64")
    return _Kind("int", lo, hi)


def _number(k: _Kind) -> _Kind:
    """A bool in arithmetic is the int 0 or 1, as in Python; a str is not a number here."""
    if k.kind == "str":
        raise _Unsafe("arithmetic on a str")
    return _Kind("int", 0, 1) if k.kind == "bool" else k


def _as_float(k: _Kind) -> None:
    """An int that meets a float must convert to float64 exactly, as Python's does."""
    if k.kind == "int" and max(-k.lo, k.hi) > _EXACT_FLOAT_INT:
        raise _Unsafe("an int too large for float64 meets a float")


def _binary_kind(op: ast.operator, a: _Kind, b: _Kind) -> _Kind:
    if a.kind == "float" or b.kind == "float" or isinstance(op, ast.Div):
        if isinstance(op, ast.Pow):
            raise _Unsafe("** with a float: Python may raise or give a complex")
        _as_float(a)
        _as_float(b)
        return _Kind("float")
    corners = [(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    if isinstance(op, ast.Add):
        return _bounded(a.lo + b.lo, a.hi + b.hi)
    if isinstance(op, ast.Sub):
        return _bounded(a.lo - b.hi, a.hi - b.lo)
    if isinstance(op, ast.Mult):
        products = [x * y for x, y in corners]
        return _bounded(min(products), max(products))
    if isinstance(op, ast.FloorDiv):
        most = max(-a.lo, a.hi, 1)
        return _bounded(-most, most)
    if isinstance(op, ast.Mod):
        most = max(-b.lo, b.hi)
        return _bounded(-most, most)
    assert isinstance(op, ast.Pow)
    if b.lo < 0:
        raise _Unsafe("** with a negative exponent gives a float (or raises) in Python")
    base = max(-a.lo, a.hi)
    if base <= 1:
        return _bounded(-1, 1)
    if b.hi * base.bit_length() > 64:
        raise _Unsafe("** beyond int64")
    return _bounded(-(base**b.hi), base**b.hi)


def _comparable(left: _Kind, value: Any) -> bool:
    """Whether ``left == value`` can be true (a str never equals a number, nor None anything)."""
    if value is None:
        return False
    return (left.kind == "str") == isinstance(value, str)


def _compared(a: _Kind, b: _Kind) -> None:
    if (a.kind == "str") != (b.kind == "str"):
        raise _Unsafe("a str compared with a number")  # False for ==, TypeError for <
    if "float" in (a.kind, b.kind):
        _as_float(a)
        _as_float(b)


def _fast(node: ast.expr, columns: dict[str, NDArray[Any]]) -> tuple[Any, Any]:
    """The node's values, and where Python would have raised ZeroDivisionError."""
    np = _numpy()
    if isinstance(node, ast.Name):
        return columns[node.id], np.False_
    if isinstance(node, ast.Constant):
        return np.asarray(node.value), np.False_
    if isinstance(node, ast.UnaryOp):
        value, error = _fast(node.operand, columns)
        if isinstance(node.op, ast.Not):
            return ~_truth(value), error
        value = _arith(value)
        return (-value if isinstance(node.op, ast.USub) else value), error
    if isinstance(node, ast.BoolOp):
        return _fast_bool(node, columns)
    if isinstance(node, ast.BinOp):
        (left, e1), (right, e2) = _fast(node.left, columns), _fast(node.right, columns)
        left, right = _arith(left), _arith(right)
        op = type(node.op)
        if op in (ast.Div, ast.FloorDiv, ast.Mod):
            zero = right == 0
            safe = np.where(zero, 1, right)
            if op is ast.Div:
                left, safe = np.asarray(left, dtype=np.float64), np.asarray(safe, dtype=np.float64)
            return BINARY[op](left, safe), e1 | e2 | zero
        return BINARY[op](left, right), e1 | e2
    if isinstance(node, ast.Compare):
        return _fast_compare(node, columns)
    raise _Unsafe(type(node).__name__)


def _fast_bool(node: ast.BoolOp, columns: dict[str, NDArray[Any]]) -> tuple[Any, Any]:
    """and/or as truth values; an operand's error counts only where Python evaluates it."""
    np = _numpy()
    is_and = isinstance(node.op, ast.And)
    decided: Any = np.False_  # rows whose result an earlier operand settled
    result: Any = np.bool_(is_and)
    error: Any = np.False_
    for part in node.values:
        value, part_error = _fast(part, columns)
        error = error | (~decided & part_error)
        truth = _truth(value)
        result = np.where(decided, result, truth)
        decided = decided | (truth != is_and) | error
    return result, error


def _fast_compare(node: ast.Compare, columns: dict[str, NDArray[Any]]) -> tuple[Any, Any]:
    """A comparison chain; a link's error counts only where the links before it held."""
    np = _numpy()
    left, error = _fast(node.left, columns)
    result: Any = np.True_
    for op, comparator in zip(node.ops, node.comparators):
        if isinstance(op, (ast.In, ast.NotIn)):
            assert isinstance(comparator, (ast.List, ast.Tuple, ast.Set))
            hit: Any = np.False_
            for e in comparator.elts:
                assert isinstance(e, ast.Constant)
                if _comparable(_column_like(left), e.value):
                    hit = hit | (left == e.value)
            outcome = hit if isinstance(op, ast.In) else ~hit
            result = result & outcome
            continue
        right, right_error = _fast(comparator, columns)
        error = error | (result & right_error)  # a chain stops at its first false link
        result = result & COMPARE[type(op)](left, right)
        left = right
    return result, error


def _column_like(value: Any) -> _Kind:
    return _Kind("str") if _numpy().asarray(value).dtype.kind == "U" else _Kind("float")


def _arith(value: Any) -> Any:
    """Bools as ints (``True + True == 2``), as in Python."""
    np = _numpy()
    value = np.asarray(value)
    return value.astype(np.int64) if value.dtype.kind == "b" else value


def _truth(value: Any) -> Any:
    """Python's truth of each value: non-zero numbers, non-empty strings."""
    np = _numpy()
    value = np.asarray(value)
    if value.dtype.kind == "b":
        return value
    if value.dtype.kind == "U":
        return value != ""
    return value != 0


def _numpy() -> Any:
    import numpy

    return numpy
