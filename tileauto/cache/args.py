"""Call arguments as in-process keys: hashable, JSON-able, tensors reduced to their layout.

The per-call fast path of the ``@jit`` and ``@autotune`` memos; any object it cannot describe
itself is described as the disk cache's keys describe it (:mod:`tileauto.cache.key`).
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from typing import Any

from tileauto.cache.key import describe_key_value
from tileauto.cache.walk import UnkeyableError, is_tensor, tensor_layout


def describe_value(value: Any) -> Any:
    """A JSON-able description of one argument: tensors by shape/dtype/stride/device.

    Plain values and containers are described here (the per-call fast path); any other
    object is described by the disk cache's describer (``cache.key.describe_key_value``,
    by its state, never by its ``repr``), so a value has one description in memory and on
    disk. An object that describer refuses counts by its type and identity.
    """
    if is_tensor(value):
        return tensor_layout(value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [describe_value(v) for v in value]
    if isinstance(value, dict):
        return {
            str(k): describe_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        }
    dtype_name = getattr(value, "__name__", None)
    if type(value).__module__.startswith("torch") and dtype_name is None:
        return str(value)  # torch.dtype, torch.device
    try:
        return describe_key_value(value, content=False)
    except UnkeyableError:
        return {"object": type(value).__qualname__, "id": id(value)}


def freeze(value: Any) -> Any:
    """Make a described value hashable (lists become tuples, dicts sorted item tuples)."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, freeze(v)) for k, v in value.items())
    if isinstance(value, (bool, int, float)):
        return _scalar_key(value)
    return value


def _scalar_key(value: bool | float) -> tuple[str, Any]:
    """A number as a key: True, 1 and 1.0 compare equal but differ here; a float by its exact
    bits' text, so that -0.0 is not 0.0 (1/d, copysign) and a NaN finds itself (nan != nan)."""
    if type(value) is float:
        return ("float", value.hex())
    return (type(value).__name__, value)


_PLAIN = (int, float, str, bool, type(None))


def _plain_scalar(value: Any) -> Any:
    """numpy (or other) scalar numbers as Python's: TVM rejects ``np.int64`` sizes."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and hasattr(value, "item"):
        return float(value)
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)  # numpy.bool_ (named bool since numpy 2) is not a Number
    return value


def plain_arguments(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """A call's scalar arguments as Python numbers (shapes often come from numpy)."""
    if all(type(v) in _PLAIN for v in args) and all(type(v) in _PLAIN for v in kwargs.values()):
        return args, kwargs  # the common case, at no cost
    return (
        tuple(_plain_scalar(v) for v in args),
        {k: _plain_scalar(v) for k, v in kwargs.items()},
    )


def fast_key(args: tuple, kwargs: dict[str, Any]) -> tuple | None:
    """A cheap identity for calls made only of plain scalars (no signature binding), else None.

    Used as a first-level cache in front of :func:`call_key`: the same literal call maps to the
    same kernel without binding the signature again (about 1 us instead of tens).
    """
    for value in args:
        if type(value) not in _PLAIN:
            return None
    for value in kwargs.values():
        if type(value) not in _PLAIN:
            return None
    return (
        tuple(_scalar_key(v) for v in args),
        tuple(sorted((k, *_scalar_key(v)) for k, v in kwargs.items())),
    )


def bind_arguments(
    fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], *, partial: bool = False
) -> dict[str, Any]:
    """Bind a call to ``fn``'s signature with defaults applied, by parameter name.

    With ``partial=True`` required parameters may be missing: the tunables of a TileLang-style
    factory (``def kernel(threads): ...``) have no default, and the configs supply them.

    Raises:
        TypeError: the call does not fit the signature (names the function).
    """
    sig = inspect.signature(fn)
    try:
        bound = sig.bind_partial(*args, **kwargs) if partial else sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)}{sig}: {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def passed_arguments(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments a call gives, by parameter name (``fn``'s defaults not applied: a
    tunable the call passes is fixed, one it leaves is tuned)."""
    return dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)


def call_key(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> tuple:
    """The hashable identity of a call: bound arguments with tensors reduced to layout."""
    bound = bind_arguments(fn, args, kwargs, partial=True)  # tunables may have no default
    return tuple((name, freeze(describe_value(value))) for name, value in bound.items())


def default_config(fn: Callable[..., Any]) -> dict[str, Any]:
    """The keyword defaults of a factory: its default config."""
    return {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


class CallCache:
    """Values made once per distinct call of a factory: a literal fast path, then the bound key.

    ``get(args, kwargs, make)`` returns the value for this call, calling ``make(args, kwargs)``
    (under a lock, once per key) when it is new. Used by ``@jit`` and ``@autotune``.

    ``fixed``: the names whose passing matters beyond their value (``@autotune``'s tunables:
    one the call passes is fixed, even at its default value, where one it leaves is tuned),
    given as a function, asked when a call is keyed.
    """

    def __init__(
        self, fn: Callable[..., Any], fixed: Callable[[], frozenset[str]] | None = None
    ) -> None:
        import threading

        self.fn = fn
        self.fixed = fixed
        self.by_key: dict[tuple, Any] = {}
        self._fast: dict[tuple, Any] = {}  # literal calls of plain scalars
        self._lock = threading.Lock()

    def get(
        self, args: tuple, kwargs: dict[str, Any], make: Callable[[tuple, dict[str, Any]], Any]
    ) -> Any:
        fast = fast_key(args, kwargs)
        if fast is None:
            args, kwargs = plain_arguments(args, kwargs)  # np.int64(4096) is 4096
            fast = fast_key(args, kwargs)
        if fast is not None:
            value = self._fast.get(fast)
            if value is not None:
                return value
        key = self.key(args, kwargs)
        value = self.by_key.get(key)
        if value is None:
            with self._lock:
                value = self.by_key.get(key)
                if value is None:
                    value = make(args, kwargs)
                    self.by_key[key] = value
        if fast is not None:
            self._fast[fast] = value
        return value

    def peek(self, args: tuple, kwargs: dict[str, Any]) -> Any | None:
        """The value made for this call, or None when there is none yet (nothing is made).

        Raises:
            TypeError: the call does not fit the function's signature.
        """
        args, kwargs = plain_arguments(args, kwargs)
        fast = fast_key(args, kwargs)
        if fast is not None:
            value = self._fast.get(fast)
            if value is not None:
                return value
        return self.by_key.get(self.key(args, kwargs))

    def key(self, args: tuple, kwargs: dict[str, Any]) -> tuple:
        """The call's bound key, with the ``fixed`` names the call passes."""
        key = call_key(self.fn, args, kwargs)
        if self.fixed is None:
            return key
        return key + (tuple(sorted(self.fixed() & passed_arguments(self.fn, args, kwargs).keys())),)
