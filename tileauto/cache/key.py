"""Cache keys: everything that changes the answer, nothing that does not.

A function counts by its normalized source: the AST with comments, docstrings, formatting and
its own decorators removed (decorators of functions nested in it stay: ``@T.prim_func(s_tir=
True)`` matters). The values it closes over and the globals it reads count too: the user's
helper functions by their own normalized source, library functions by their qualified name,
tensors and arrays by layout and content, other values by their description. Lambdas and
functions without source count by bytecode, which formatting does not change either.

Nothing here imports torch or TVM: the TVM version is read from the loaded module.
"""

from __future__ import annotations

import ast
import enum
import functools
import hashlib
import inspect
import json
import re
import sys
import textwrap
import types
from typing import Any

from tileauto.keys import describe_value, is_tensor

FORMAT_VERSION = 1

# Modules whose functions count by name (their code changes only with their version).
_LIBRARIES = {"tvm", "tvm_ffi", "torch", "numpy", "tileauto", "scipy", "cloudpickle"}
_MAX_HASHED_BYTES = 256 << 20  # bigger captured arrays count by layout only
_MAX_DEPTH = 4
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def digest(payload: Any) -> str:
    """sha256 of canonical JSON; the first 32 hex digits name a cache entry."""
    text = json.dumps(payload, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def versions() -> dict[str, str]:
    """Cache format, tileauto and TVM versions (a change in any of them is a miss)."""
    # The package is loaded (this module is part of it); no import edge back to its root.
    tileauto_version = str(getattr(sys.modules.get("tileauto"), "__version__", "unknown"))
    return {"format": str(FORMAT_VERSION), "tileauto": tileauto_version, "tvm": tvm_version()}


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


# -- functions ----------------------------------------------------------------------------------
def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]


def _source_dump(fn: types.FunctionType) -> str | None:
    """The AST dump of a named function's source, or None when it cannot be had."""
    if fn.__name__ == "<lambda>":
        return None  # getsource gives the whole line, which may hold other code
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    top = tree.body[0]
    top.decorator_list = []  # @jit / @autotune arguments are keyed on their own
    _strip_docstrings(top)
    return ast.dump(top, annotate_fields=False, include_attributes=False)


def _code_fingerprint(code: types.CodeType) -> dict[str, Any]:
    """Bytecode, constants and names: stable across processes and formatting."""
    consts = []
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            consts.append(_code_fingerprint(c))
        elif isinstance(c, frozenset):
            consts.append(sorted(repr(v) for v in c))  # set order varies with the hash seed
        else:
            consts.append(repr(c))
    return {
        "code": code.co_code.hex(),
        "consts": consts,
        "names": list(code.co_names),
        "vars": list(code.co_varnames),
    }


def normalized_source(fn: Any) -> Any:
    """A function's identity as code: its normalized AST, or its bytecode when no source."""
    fn = inspect.unwrap(getattr(fn, "factory", fn))
    if isinstance(fn, types.FunctionType):
        dump = _source_dump(fn)
        return dump if dump is not None else _code_fingerprint(fn.__code__)
    return describe_key_value(fn)


def _is_library(obj: Any) -> bool:
    module = (getattr(obj, "__module__", None) or "").split(".")[0]
    return module in _LIBRARIES or module in getattr(sys, "stdlib_module_names", ()) or not module


def function_fingerprint(fn: Any, depth: int = 0) -> dict[str, Any]:
    """Normalized source, defaults, closure values and read globals of a function.

    Also handles ``functools.partial``, bound methods and callable objects (their ``__call__``
    and their attributes), and ``@jit`` / ``@autotune`` wrappers (their factory).
    """
    fn = inspect.unwrap(getattr(fn, "factory", fn))
    if isinstance(fn, functools.partial):
        return {
            "partial": function_fingerprint(fn.func, depth + 1),
            "args": [describe_key_value(a, depth + 1) for a in fn.args],
            "kwargs": {k: describe_key_value(v, depth + 1) for k, v in sorted(fn.keywords.items())},
        }
    if isinstance(fn, types.MethodType):
        return {
            "method": function_fingerprint(fn.__func__, depth + 1),
            "self": describe_key_value(fn.__self__, depth + 1),
        }
    if not isinstance(fn, types.FunctionType):
        call = next(
            (c.__dict__["__call__"] for c in type(fn).__mro__ if "__call__" in c.__dict__), None
        )
        out: dict[str, Any] = {"callable": _qualname(type(fn))}
        if isinstance(call, types.FunctionType) and not _is_library(type(fn)):
            out["call"] = function_fingerprint(call, depth + 1)
            out["state"] = describe_key_value(getattr(fn, "__dict__", {}), depth + 1)
        return out
    out = {"source": normalized_source(fn)}
    try:
        cv = inspect.getclosurevars(fn)
        out["nonlocals"] = {
            k: describe_key_value(v, depth + 1) for k, v in sorted(cv.nonlocals.items())
        }
        out["globals"] = {
            k: describe_key_value(v, depth + 1) for k, v in sorted(cv.globals.items())
        }
    except (TypeError, ValueError):  # an empty closure cell
        pass
    out["defaults"] = {
        k: describe_key_value(v, depth + 1) for k, v in sorted(_defaults(fn).items())
    }
    return out


def _defaults(fn: types.FunctionType) -> dict[str, Any]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


# -- values -------------------------------------------------------------------------------------
def _array_fingerprint(value: Any, layout: Any) -> Any:
    """Layout plus a content hash (arrays a function closes over decide its results)."""
    try:
        if is_tensor(value):
            data = value.detach().cpu().contiguous()
            nbytes = data.numel() * data.element_size()
            if nbytes > _MAX_HASHED_BYTES:
                return layout
            uint8 = sys.modules["torch"].uint8  # a tensor exists, so torch is loaded
            raw = data.view(-1).view(uint8).numpy().tobytes()
        else:
            if value.nbytes > _MAX_HASHED_BYTES:
                return layout
            raw = value.tobytes()
    except Exception:  # noqa: BLE001 - an exotic array: its layout must do
        return layout
    return {"array": layout, "sha256": hashlib.sha256(raw).hexdigest()}


def describe_key_value(value: Any, depth: int = 0, *, content: bool = True) -> Any:
    """A JSON-able, process-independent description of a value for a cache key.

    With ``content=False`` tensors and arrays count by layout only (call arguments: the
    kernel is compiled for a shape, not for values).
    """
    if depth > _MAX_DEPTH:
        return {"deep": _qualname(type(value))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    if isinstance(value, type):
        return {"type": _qualname(value)}
    if is_tensor(value):
        layout = describe_value(value)
        return _array_fingerprint(value, layout) if content else layout
    if type(value).__module__ == "numpy" and hasattr(value, "tobytes") and hasattr(value, "shape"):
        layout = {"ndarray": list(value.shape), "dtype": str(value.dtype)}
        return _array_fingerprint(value, layout) if content else layout
    if isinstance(value, (list, tuple)):
        return [describe_key_value(v, depth + 1, content=content) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((describe_key_value(v, depth + 1, content=content) for v in value), key=repr)
    if isinstance(value, dict):
        return {
            str(k): describe_key_value(v, depth + 1, content=content)
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        }
    if hasattr(value, "factory") and callable(value):  # a @jit / @autotune factory
        return {"fn": function_fingerprint(value, depth)}
    if callable(value) and "__qualname__" in dir(value) and _is_library(value):
        return {"fn": _qualname(value)}  # a library function: its version decides its code
    if isinstance(value, (types.FunctionType, types.MethodType, functools.partial)):
        return {"fn": function_fingerprint(value, depth)}
    if isinstance(value, enum.Enum):
        return {"enum": _qualname(type(value)), "name": value.name}
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and state:  # an object: its type and its attributes
        return {"object": _qualname(type(value)), "state": describe_key_value(state, depth + 1)}
    text = describe_value(value)
    if isinstance(text, str) and _ADDRESS.search(text):  # a repr naming a memory address
        return {"object": _qualname(type(value))}
    return text


def describe_arguments(bound: dict[str, Any]) -> dict[str, Any]:
    """Bound call arguments for a key: tensors by shape, dtype, strides and device."""
    return {k: describe_key_value(v, content=False) for k, v in bound.items()}
