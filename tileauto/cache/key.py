"""Cache keys: everything that changes the answer, nothing that does not.

A factory counts by everything it can reach, walked as it would run (:mod:`tileauto.cache.walk`:
user functions by their normalized source, defaults, closure cells and the globals they read;
installed code by name and version; data by value, tensors by layout and a hash). This module
turns those descriptions into keys: the digest, the versions every key holds, a factory's
fingerprint, a call's arguments. A value with no stable description raises
:class:`UnkeyableError` and nothing is cached. What counts, part by part:
``docs/cache_format.md`` ("The key"). No torch or TVM import: TVM's version is read from the
loaded module.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sys
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from tileauto._logging import get_logger
from tileauto.cache._code import source_of
from tileauto.cache._installed import tileauto_version
from tileauto.cache.walk import UnkeyableError, Walker, factory_of

FORMAT_VERSION = 3  # in every key: a bump makes older entries misses (docs/cache_format.md)

log = get_logger("cache")

_ArgName = TypeVar("_ArgName", str, int)  # an argument's name, or a captured input's position


class _Reported:
    """The unkeyable messages logged so far: each is said once per process, not per call."""

    def __init__(self) -> None:
        self.messages: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self.messages:
            self.messages.add(message)
            log.warning("%s", message)
            # seen without a logging set-up too, like the cache's other warnings
            warnings.warn(f"tileauto cache: {message}", RuntimeWarning, stacklevel=4)


_REPORTED = _Reported()


def report_unkeyable(kernel: str, error: UnkeyableError) -> None:
    """Log (once per process and message) that ``kernel``'s results are not cached, and why."""
    _REPORTED(f"{kernel}: {error}: results are not cached")


def digest(payload: Any) -> str:
    """sha256 of canonical JSON; the first 32 hex digits name a cache entry."""
    text = json.dumps(payload, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def family_digest(factory: Any, args: Any) -> str:
    """One factory's call on every target and device: ``factory`` its fingerprint
    (:func:`function_fingerprint`), ``args`` its described call (or ``key=`` bucket), without
    the target, device or versions. The fleet's Redis groups entries by it; a tuned entry's
    manifest records it, and the cache prior reads the same call's entries first."""
    return digest({"factory": factory, "args": args})


def versions() -> dict[str, str]:
    """Cache format, tileauto and TVM versions (a change in any of them is a miss)."""
    return {"format": str(FORMAT_VERSION), "tileauto": tileauto_version(), "tvm": tvm_version()}


@functools.lru_cache(maxsize=1)
def tvm_version() -> str:
    """The TVM version: from the loaded module, else from the installed distribution."""
    tvm = sys.modules.get("tvm")
    if tvm is not None and getattr(tvm, "__version__", None):
        return str(tvm.__version__)
    try:
        from importlib.metadata import version

        return version("apache-tvm")
    except Exception:  # noqa: BLE001 - a source build without metadata
        return "unknown"


# -- public entry points ------------------------------------------------------------------------
def function_fingerprint(fn: Any, *, owner: str | None = None) -> Any:
    """Everything ``fn`` can reach (see the module docstring), as JSON.

    Also handles ``functools.partial``, bound methods, callable objects and ``@jit`` /
    ``@autotune`` wrappers (their factory). ``owner`` names ``fn`` in an error (``ref_prog``).

    Raises:
        UnkeyableError: something ``fn`` reaches has no stable description.
    """
    try:
        return Walker().walk(factory_of(fn) or fn, ("", ""))
    except UnkeyableError as exc:
        if owner is None:
            raise
        raise UnkeyableError(f"{exc.path} of {owner}", exc.reason) from None


def factory_module(factory: Any) -> str | None:
    """The module a factory is defined in, as entries record it: the last part of its
    ``__module__`` (``kernels.gemm_cuda`` and ``gemm_cuda`` are one), and for a script run as
    ``__main__`` the script's file name (``python gemm_cuda.py`` defines ``gemm_cuda``'s
    factories, as an import of it would). None where neither is known."""
    module = getattr(factory, "__module__", None)
    if module == "__main__":
        code = getattr(inspect.unwrap(factory), "__code__", None)
        filename = getattr(code, "co_filename", "")
        return Path(filename).stem if filename.endswith(".py") else None
    return module.rpartition(".")[2] if isinstance(module, str) and module else None


def describe_key_value(value: Any, *, content: bool = True) -> Any:
    """A JSON-able, process-independent description of a value for a cache key.

    With ``content=False`` tensors and arrays count by layout only (call arguments: the
    kernel is compiled for a shape, not for values).

    Raises:
        UnkeyableError: the value (or something in it) has no stable description.
    """
    return Walker(content).walk(value, ("", ""))


def describe_arguments(bound: Mapping[_ArgName, Any]) -> dict[_ArgName, Any]:
    """Arguments for a key, by name (bound call arguments) or by position (captured inputs):
    tensors by shape, dtype, strides and device. The keys are kept as they are.

    Raises:
        UnkeyableError: an argument (or something in it) has no stable description.
    """
    return {k: Walker(content=False).walk(v, ("argument", str(k))) for k, v in bound.items()}


def normalized_source(fn: Any) -> Any:
    """A function's identity as code: its normalized AST, or its bytecode when no source."""
    fn = inspect.unwrap(factory_of(fn) or fn)
    if isinstance(fn, types.FunctionType):
        return source_of(fn)
    return describe_key_value(fn)
