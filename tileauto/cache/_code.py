"""A function's code as a cache key sees it: normalized source, else bytecode.

A named function counts by the AST dump of its source, without docstrings and decorators, so
that formatting, comments and ``@jit`` arguments (keyed on their own) do not change a key;
a lambda, or code whose source cannot be read, counts by its bytecode, constants and names.
Dumps are remembered per source file's exact contents (:mod:`tileauto.cache._memo`).
"""

from __future__ import annotations
import __future__

import ast
import functools
import hashlib
import inspect
import textwrap
import types
import warnings
from pathlib import Path
from typing import Any

from tileauto.cache._memo import Memo, memo_dir


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
    """The AST dump of a named function's source, or None when it cannot be had.

    Remembered per source file's exact contents (``sources/<sha256>.json``, see
    :mod:`tileauto.cache._memo`): parsing and dumping is most of a warm key's time, and the
    same bytes give the same dump.
    """
    if fn.__name__ == "<lambda>":
        return None  # getsource gives the whole line, which may hold other code
    code = fn.__code__
    memo = _sources_of(code.co_filename)
    # the code's own name and line: functools.wraps gives a wrapper the wrapped one's
    # __qualname__ (":2": dumps read through __wrapped__ by earlier versions are not used)
    where = f"{code.co_firstlineno}:{getattr(code, 'co_qualname', code.co_name)}:2"
    if memo is not None and where in memo:
        known = memo.get(where)
        return known if isinstance(known, str) else None
    dump = _parsed_dump(fn)
    if memo is not None:
        memo.add(where, dump)
    return dump


SOURCES_DIR = "sources"


def _sources_of(filename: str) -> Memo | None:
    """The memo of the functions of ``filename`` as it is now; None for code with no file.

    The file is read and hashed at every call (tens of microseconds): an edit is another
    digest, so a dump is never served for other contents.
    """
    try:
        with open(filename, "rb") as f:
            digest_now = hashlib.sha256(f.read()).hexdigest()
    except OSError:  # "<stdin>", a notebook cell, a module that was removed
        return None
    return _sources_at(memo_dir(SOURCES_DIR), digest_now)


@functools.lru_cache(maxsize=64)
def _sources_at(directory: Path | None, digest_now: str) -> Memo:
    return Memo(directory / f"{digest_now}.json" if directory is not None else None)


def _parsed_dump(fn: types.FunctionType) -> str | None:
    try:  # of the code itself: getsource(fn) follows __wrapped__ to the wrapped function
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn.__code__)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    top = tree.body[0]
    if top.name != fn.__code__.co_name:  # not this code's definition: go by its bytecode
        return None
    top.decorator_list = []  # @jit / @autotune arguments are keyed on their own
    _strip_docstrings(top)
    return ast.dump(top, annotate_fields=False, include_attributes=False)


def code_fingerprint(code: types.CodeType) -> dict[str, Any]:
    """Bytecode, constants and names: stable across processes and formatting."""
    return {
        "code": code.co_code.hex(),
        "consts": [_constant(c) for c in code.co_consts],
        "names": list(code.co_names),
        "vars": list(code.co_varnames),
    }


def _constant(value: Any) -> Any:
    if isinstance(value, types.CodeType):
        return code_fingerprint(value)
    if isinstance(value, tuple):
        return [_constant(v) for v in value]
    if isinstance(value, frozenset):  # set order varies with the hash seed
        return sorted((_constant(v) for v in value), key=repr)
    return repr(value)


def source_of(fn: types.FunctionType) -> Any:
    dump = _source_dump(fn)
    return dump if dump is not None else code_fingerprint(fn.__code__)


def code_names(code: types.CodeType) -> frozenset[str]:
    """Every name the code reads, its nested functions, lambdas, comprehensions and classes too.

    ``co_names`` holds globals and attribute names alike, and identifier-like string constants
    may be names too (``getattr(cfg, "OFFSET")``); the walk keeps those that resolve. Under
    ``from __future__ import annotations`` an annotation is a string constant (in a tuple of
    them, for a nested function's), which TVMScript evaluates (``"T.Buffer((N,), DT)"``): the
    names of every constant that parses as an expression count too.
    """
    names = set(code.co_names)
    stringly = bool(code.co_flags & _FUTURE_ANNOTATIONS)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= code_names(const)
        elif isinstance(const, str) and const.isidentifier():
            names.add(const)
        elif stringly and isinstance(const, (str, tuple)):
            names |= _annotation_names(const)
    return frozenset(names)


_FUTURE_ANNOTATIONS = __future__.annotations.compiler_flag
_MAX_ANNOTATION = 1000  # longer strings are text, not annotations: not parsed


def _annotation_names(const: str | tuple[Any, ...]) -> frozenset[str]:
    """The names a string constant (or the strings of a tuple constant) reads as an expression."""
    if isinstance(const, tuple):
        names: set[str] = set()
        for item in const:
            if isinstance(item, str) and item.isidentifier():
                names.add(item)
            elif isinstance(item, (str, tuple)):
                names |= _annotation_names(item)
        return frozenset(names)
    if len(const) > _MAX_ANNOTATION:
        return frozenset()
    return _expression_names(const)


@functools.lru_cache(maxsize=4096)
def _expression_names(text: str) -> frozenset[str]:
    try:
        with warnings.catch_warnings():  # an invalid escape in a string that is no annotation
            warnings.simplefilter("ignore")
            tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    return frozenset(node.id for node in ast.walk(tree) if isinstance(node, ast.Name))


def source_imports(source: bytes, digest: str, package: str) -> dict[str, tuple[str, ...]]:
    """The modules a module's source imports, by absolute name, each with the names its
    ``from ... import`` statements read from it (each may be a submodule): every import
    statement of the file, those inside its functions too (they run when the function does);
    relative ones resolved against ``package`` (dropped where they cannot be). Source that does
    not parse imports nothing. Remembered per ``digest`` (the source's sha256) and ``package``.
    """
    known = _SOURCE_IMPORTS.get((digest, package))
    if known is not None:
        return known
    try:
        with warnings.catch_warnings():  # an invalid escape sequence in a string
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = ast.Module(body=[], type_ignores=[])
    out: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.setdefault(alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                name = _resolved("." * node.level + name, package)
            if name:
                names = tuple(a.name for a in node.names if a.name != "*")
                out[name] = tuple(dict.fromkeys(out.get(name, ()) + names))
    if len(_SOURCE_IMPORTS) >= _MAX_SOURCE_IMPORTS:
        _SOURCE_IMPORTS.clear()
    _SOURCE_IMPORTS[(digest, package)] = out
    return out


_SOURCE_IMPORTS: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
_MAX_SOURCE_IMPORTS = 4096


def _resolved(relative: str, package: str) -> str:
    import importlib.util

    try:
        return importlib.util.resolve_name(relative, package)
    except (ImportError, ValueError, TypeError):
        return ""


def defaults(fn: types.FunctionType) -> list[tuple[str, Any]]:
    """Default arguments by parameter name: positional ones, then keyword-only ones."""
    code = fn.__code__
    positional = code.co_varnames[: code.co_argcount]
    values = fn.__defaults__ or ()
    pairs = list(zip(positional[len(positional) - len(values) :], values))
    return pairs + sorted((fn.__kwdefaults__ or {}).items())
