"""The kernel language: TVMScript for TVM 0.27 (``tvm.script.tirx``) plus a few helpers.

Kernels read ``import tileauto.language as T`` and then use ``@T.prim_func``, ``T.Buffer``,
``T.grid``, ``T.sblock`` and friends exactly as in TVMScript. The helpers below are the small
things kernel authors keep rewriting.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tvm.script.tirx import *  # noqa: F403  (the dialect is the public surface of this module)
    from tvm.script.tirx import prim_func  # noqa: F401  (explicit for readers and type checkers)

_HELPERS = ("ceildiv", "next_power_of_2", "divisors", "powers_of_2")


def __getattr__(name: str) -> Any:
    """The TVMScript dialect, imported on first use (PEP 562).

    ``import tileauto.language as T`` at the top of a kernel module then costs nothing: TVM's
    compiler is imported when a factory first uses ``T.prim_func``, ``T.Buffer``..., so a
    process that only loads tuned kernels never imports it.
    """
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module 'tileauto.language' has no attribute {name!r}")
    dialect = importlib.import_module("tvm.script.tirx")
    if name == "__all__":  # ``from tileauto.language import *``: the dialect and the helpers
        names = getattr(dialect, "__all__", None) or [n for n in vars(dialect) if n[0] != "_"]
        return sorted(set(names) | set(_HELPERS))
    try:
        value = getattr(dialect, name)
    except AttributeError:
        raise AttributeError(
            f"module 'tileauto.language' has no attribute {name!r} (nor has tvm.script.tirx)"
        ) from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__getattr__("__all__")))


def ceildiv(a, b):
    """``ceil(a / b)`` for positive ints or TIR expressions."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1); handy for tuning keys."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def divisors(n: int, *, at_most: int | None = None) -> list[int]:
    """Positive divisors of ``n`` in increasing order, optionally bounded: tile-size candidates."""
    out = [d for d in range(1, n + 1) if n % d == 0]
    return [d for d in out if at_most is None or d <= at_most]


def powers_of_2(low: int, high: int) -> list[int]:
    """Powers of two in ``[low, high]``."""
    out, p = [], 1
    while p <= high:
        if p >= low:
            out.append(p)
        p *= 2
    return out
