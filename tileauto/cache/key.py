"""Cache keys: everything that changes the answer, nothing that does not.

A factory counts by its normalized source (the AST without comments, docstrings, formatting or
decorators), the values it closes over and the globals it uses (helper functions by their own
normalized source), and its defaults.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import textwrap
import types
from collections.abc import Callable
from typing import Any

from tileauto.keys import describe_value

FORMAT_VERSION = 1


def _strip(node: ast.AST) -> ast.AST:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = getattr(sub, "body", [])
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                sub.body = body[1:] or [ast.Pass()]
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            sub.decorator_list = []
    return node


def normalized_source(fn: Any) -> str:
    """The function's AST dump (formatting, comments, docstrings and decorators removed).

    Falls back to the code object's bytecode and constants when the source is unavailable.
    """
    fn = inspect.unwrap(getattr(fn, "factory", fn))
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
        return ast.dump(_strip(tree), annotate_fields=False, include_attributes=False)
    except (OSError, TypeError, SyntaxError, IndentationError):
        code = getattr(fn, "__code__", None)
        if code is None:
            return repr(fn)
        return repr((code.co_code, code.co_consts, code.co_names))


def _describe_global(value: Any, depth: int) -> Any:
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    if isinstance(value, (types.FunctionType, types.MethodType)) or hasattr(value, "factory"):
        module = getattr(value, "__module__", "") or ""
        # Library functions count by identity; the user's own helpers by their source.
        if module.split(".")[0] in (
            "tvm",
            "torch",
            "numpy",
            "tileauto",
            "math",
            "functools",
            "builtins",
        ):
            return {"fn": f"{module}.{getattr(value, '__qualname__', '')}"}
        return (
            {"fn": function_fingerprint(value, depth + 1)}
            if depth < 3
            else {"fn": getattr(value, "__qualname__", "?")}
        )
    if isinstance(value, type):
        return {"type": f"{value.__module__}.{value.__qualname__}"}
    return describe_value(value)


def function_fingerprint(fn: Callable[..., Any], depth: int = 0) -> dict[str, Any]:
    """Normalized source, defaults, closure values and used globals of a function."""
    fn = inspect.unwrap(getattr(fn, "factory", fn))
    out: dict[str, Any] = {"source": normalized_source(fn)}
    try:
        cv = inspect.getclosurevars(fn)
        out["nonlocals"] = {k: _describe_global(v, depth) for k, v in sorted(cv.nonlocals.items())}
        out["globals"] = {k: _describe_global(v, depth) for k, v in sorted(cv.globals.items())}
    except (TypeError, ValueError):
        pass
    try:
        out["defaults"] = {
            k: describe_value(p.default)
            for k, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
    except (TypeError, ValueError):
        pass
    return out


def digest(payload: Any) -> str:
    """sha256 of canonical JSON (the first 32 hex digits name a cache entry)."""
    text = json.dumps(payload, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def versions() -> dict[str, str]:
    import tvm

    import tileauto

    return {
        "format": str(FORMAT_VERSION),
        "tileauto": tileauto.__version__,
        "tvm": str(tvm.__version__),
    }


def tensor_content_hash(tensors: Any) -> str | None:
    """sha256 of captured input tensors' bytes (they decide validation, so they are keyed)."""
    if not tensors:
        return None
    h = hashlib.sha256()
    for t in tensors:
        data = t.detach().cpu().contiguous()
        h.update(str((tuple(data.shape), str(data.dtype))).encode())
        h.update(data.view(-1).view(__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()
