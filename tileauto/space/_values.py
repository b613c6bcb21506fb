"""Config values: plain data only, one stable id per config, and arrays of values.

A config is stored as JSON and must come back equal from the cache, so its values are plain
data (numpy scalars become Python numbers); its id is its sorted JSON. numpy is imported only
by the functions that need it, so importing the space stays cheap for the command line.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from numpy.typing import NDArray


# one encoder for every id: json.dumps makes a new one per call when given options
_ID_ENCODER = json.JSONEncoder(sort_keys=True, default=repr)


def config_id(config: dict[str, Any]) -> str:
    """A stable text identity of a config (sorted JSON)."""
    return _ID_ENCODER.encode(config)


def value_key(value: Any) -> Any:
    """A key of one config value, equal exactly where the values' JSON is (as in
    :func:`config_id`): a scalar by its kind and text, in a fraction of a microsecond (a
    space of 10^5 configs keys each value of each), anything else by its JSON."""
    if value is None or isinstance(value, bool):
        return (bool, value)
    if isinstance(value, int):
        return (int, int.__repr__(value))  # an IntEnum's JSON is its number too
    if isinstance(value, float):
        return (float, float.__repr__(value))  # JSON's text of a float; -0.0 is not 0.0
    if isinstance(value, str):
        return (str, str(value))
    return _ID_ENCODER.encode({"v": value})


def is_numpy_bool(value: Any) -> bool:
    """``numpy.bool_`` (named ``bool`` since numpy 2), which is not a ``numbers.Number``."""
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")


def not_plain(value: Any) -> str | None:
    """Why a config value cannot round-trip through JSON, or None when it can."""
    if is_numpy_bool(value):
        return None  # made a Python bool by plain()
    if value is None or isinstance(value, (bool, str, numbers.Integral, numbers.Real)):
        if isinstance(value, numbers.Real) and not isinstance(value, (int, float)):
            if not hasattr(value, "item"):  # numpy scalars are converted; others are not
                return f"a {type(value).__name__}"
        return None
    if isinstance(value, (list, tuple)):
        return next((p for p in map(not_plain, value) if p is not None), None)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return "a dict with keys that are not strings"
        return next((p for p in map(not_plain, value.values()) if p is not None), None)
    what = getattr(value, "__qualname__", None) or type(value).__qualname__
    module = getattr(value, "__module__", None) or type(value).__module__
    return f"{'a function' if callable(value) else 'an object'} ({module}.{what})"


def plain(value: Any) -> Any:
    """numpy scalars as Python numbers (TVM and JSON take those only)."""
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if is_numpy_bool(value):
        return bool(value)
    if not isinstance(value, (bool, int, float)) and isinstance(value, numbers.Number):
        return value.item() if hasattr(value, "item") else value
    return value


class _Absent:
    """The value of a parameter that a config of a list does not set."""

    def __repr__(self) -> str:
        return "<not set>"


ABSENT: Any = _Absent()


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def numpy_module() -> Any:
    import numpy

    return numpy


def array(values: list[Any]) -> NDArray[Any]:
    """Values as an array: ints (within int64), floats, bools and strings keep their dtype;
    anything else, mixed ints and floats included, is an object (exact, as Python holds it)."""
    np = numpy_module()
    kinds = {type(v) for v in values}
    if kinds <= {int} and all(-(1 << 63) < v < 1 << 63 for v in values):
        return np.array(values, dtype=np.int64)
    if kinds <= {float} or kinds <= {bool}:
        return np.array(values)
    if kinds <= {str} and not any(v.endswith("\0") for v in values):  # numpy drops trailing NULs
        return np.array(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def radix(sizes: Sequence[int]) -> list[int]:
    """Place values of a mixed-radix number whose first digit is the most significant."""
    out, acc = [], 1
    for s in reversed(sizes):
        out.append(acc)
        acc *= s
    return out[::-1]
