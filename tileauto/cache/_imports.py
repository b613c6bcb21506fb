"""The modules a function's code imports, found without importing anything.

A cache key counts what user code imports: installed code by name, the user's own files by
their bytes, and those files' own imports in turn (a helper's helper decides the results as
much as the helper). The import statements are read off the bytecode of a function (and of
the functions nested in it) and off the source of the user's files; modules are located by
their top-level package's spec and then folder by folder, as Python's path finder would, so a
key does not depend on what the process happened to import first. :mod:`tileauto.cache.walk`
describes a function with it.
"""

from __future__ import annotations

import hashlib
import opcode
import os
import sys
import types
from collections.abc import Iterable
from typing import Any

from tileauto.cache._code import source_imports


def imported_modules(code: types.CodeType, package: Any) -> list[str]:
    """The absolute names of the modules the code's import statements (its nested functions'
    too) import, in order, each once; a relative import is resolved against ``package``."""
    return list(code_imports(code, package))


def code_imports(code: types.CodeType, package: Any) -> dict[str, tuple[str, ...]]:
    """:func:`imported_modules`, each with the names its ``from ... import`` statements read
    from it (``from pkg import helpers``: ``("helpers",)``, which may be a submodule)."""
    out: dict[str, tuple[str, ...]] = {}
    if _IMPORT_NAME in code.co_code[::2]:  # opcodes sit at even offsets: most code has none
        _merge_imports(out, _imports_of(code, package))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _merge_imports(out, code_imports(const, package).items())
    return out


def _merge_imports(
    out: dict[str, tuple[str, ...]], found: Iterable[tuple[str, tuple[str, ...]]]
) -> None:
    for name, names in found:
        out[name] = tuple(dict.fromkeys(out.get(name, ()) + names))


_IMPORT_NAME = opcode.opmap["IMPORT_NAME"]


def _imports_of(code: types.CodeType, package: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The modules ``code``'s own import statements name (not its nested functions'), each with
    the names of its ``from ... import`` (its fromlist; empty for ``import x``).

    Read off the bytecode: ``import`` is ``LOAD_CONST level; LOAD_CONST fromlist;
    IMPORT_NAME name``. Decoded here, since ``dis.get_instructions`` costs ~10 us an instruction
    (a warm process's first call walks every function the factory reaches)."""
    import importlib.util

    out: list[tuple[str, tuple[str, ...]]] = []
    raw, high = code.co_code, 0
    loaded: list[Any] = [None, None]  # the values of the last two constants loaded in a row
    for i in range(0, len(raw), 2):
        op, arg = raw[i], raw[i + 1] | high
        high = arg << 8 if op == _EXTENDED_ARG else 0
        if op in (_EXTENDED_ARG, _CACHE):
            continue
        if op == _IMPORT_NAME:
            level = loaded[-2] if type(loaded[-2]) is int else 0
            fromlist = loaded[-1] if type(loaded[-1]) is tuple else ()
            name = code.co_names[arg]
            if level:
                try:
                    name = importlib.util.resolve_name("." * level + name, package)
                except (ImportError, ValueError, TypeError):
                    name = ""
            if name:
                names = tuple(n for n in fromlist if type(n) is str and n != "*")
                out.append((name, names))
        value = code.co_consts[arg] if op == _LOAD_CONST else arg if op == _LOAD_SMALL_INT else None
        loaded = [loaded[-1], value] if op in (_LOAD_CONST, _LOAD_SMALL_INT) else [None, None]
    return out


_EXTENDED_ARG, _LOAD_CONST = opcode.EXTENDED_ARG, opcode.opmap["LOAD_CONST"]
_CACHE = opcode.opmap.get("CACHE", -1)  # 3.11+: inline cache entries between instructions
_LOAD_SMALL_INT = opcode.opmap.get("LOAD_SMALL_INT", -1)  # 3.14+: small ints, a level too

_MAX_IMPORT_DEPTH = 16  # how many files deep a module's own imports are followed


def imports_described(code: types.CodeType, package: Any) -> dict[str, Any]:
    """The modules code imports itself, by absolute name (see :func:`imported_module`).

    Besides each module an import statement names, a name ``from pkg import helpers`` reads
    counts as the submodule ``pkg.helpers`` where the user has such a file, and a file of the
    user's counts with the user modules it imports itself (its import statements, read from its
    source), theirs in turn, up to :data:`_MAX_IMPORT_DEPTH` files deep, each once: a helper's
    helper decides the results as much as the helper. Installed code is never followed. Only
    the user's files are added, so the description of an import of installed code, or of a
    name that is no submodule (``from helpers import body``), is as it was.
    """
    out: dict[str, Any] = {}
    sources: dict[str, _Source] = {}  # the user's files met, by module name
    for name, names in code_imports(code, package).items():
        out[name] = _imported(name, sources)
        _add_submodules(out, name, names, sources)
    met = set(out)  # names looked up already: the user's files are in ``out``
    layer = list(sources)
    for _ in range(_MAX_IMPORT_DEPTH):
        reached: list[str] = []
        for module in layer:
            data, digest, path = sources[module]
            inside = _package_of(module, path)
            for name, names in source_imports(data, digest, inside).items():
                if name not in met:
                    met.add(name)
                    described = _imported(name, sources)
                    if "file" in described:  # the user's: it counts, and is followed
                        out[name] = described
                        reached.append(name)
                reached.extend(_add_submodules(out, name, names, sources))
        if not reached:
            break
        layer = reached
    return out


_Source = tuple[bytes, str, str]  # a file's bytes, their sha256, its path


def _add_submodules(
    out: dict[str, Any], name: str, names: tuple[str, ...], sources: dict[str, _Source]
) -> list[str]:
    """Count ``name.x`` for each ``x`` of ``names`` that is a file of the user's (a submodule
    ``from name import x`` imports); the names added."""
    added = []
    for part in names:
        sub = f"{name}.{part}"
        if sub in out:
            continue
        described = _imported(sub, sources)
        if "file" in described:
            out[sub] = described
            added.append(sub)
    return added


def _package_of(name: str, path: str) -> str:
    """The package a module's relative imports resolve against: itself for a package."""
    return name if os.path.basename(path) == "__init__.py" else name.rpartition(".")[0]


def imported_module(name: str) -> Any:
    """A module an import statement names, the same whether it is imported yet or not (a key
    must not depend on what else the process imported first): installed code by its name, the
    user's by its file's bytes. Nothing is imported to find it."""
    return _imported(name, {})


def _imported(name: str, sources: dict[str, _Source]) -> dict[str, Any]:
    """:func:`imported_module`; the bytes and sha256 of a file of the user's go to ``sources``."""
    kind, path = _locate(name)
    if kind == "installed":
        return {"import": name, "installed": True}
    if kind != "user":
        return {"import": name}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return {"import": name}
    digest = hashlib.sha256(data).hexdigest()
    sources[name] = (data, digest, path)
    return {"import": name, "file": digest}


def _locate(name: str) -> tuple[str, str]:
    """Where the module of absolute ``name`` is, found without importing anything (its
    top-level package's spec, then folder by folder): ``("user", path)`` for a file of the
    user's, ``("installed", "")`` for the standard library or installed code, ``("", "")``
    where there is no file to count (no such module, a built-in, tileauto, a namespace package
    itself, a namespace package's installed file)."""
    import importlib.util

    top, _, rest = name.partition(".")
    try:
        loaded = sys.modules.get(top)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else None
        spec = spec or importlib.util.find_spec(top)  # a top-level name: nothing imported
    except (ImportError, ValueError, AttributeError):
        spec = None
    if top == "tileauto" or spec is None:
        return "", ""
    origin = getattr(spec, "origin", None)
    folders = list(getattr(spec, "submodule_search_locations", None) or [])
    namespace = origin in (None, "namespace") and bool(folders)  # no __init__.py: its folders
    if origin in (None, "built-in", "frozen") and not namespace:
        return "", ""
    path = ""
    if not namespace:
        if _installed_path(str(origin)):
            return "installed", ""
        path = str(origin)
    for part in rest.split(".") if rest else []:  # a submodule of the user's, by its path
        path, folders = _submodule(folders, part)
        if not path and not folders:
            return "", ""
    if not path:  # a namespace package: no file of its own
        return "", ""
    if namespace and _installed_path(path):  # counted by name, as before namespaces were read
        return "", ""
    return "user", path


def _submodule(folders: list[str], part: str) -> tuple[str, list[str]]:
    """The file of submodule ``part`` of a package with these folders, and its folders: a
    package's ``__init__.py``, else a module's ``.py`` file, else (``""``) a namespace package
    (a folder without ``__init__.py``), as Python's path finder looks them up."""
    portions = []
    for folder in folders:
        base = os.path.join(folder, part)
        init = os.path.join(base, "__init__.py")
        if os.path.isfile(init):
            return init, [base]
        if os.path.isfile(base + ".py"):
            return base + ".py", []
        if os.path.isdir(base):
            portions.append(base)
    return "", portions


def _installed_path(path: str) -> bool:
    """A file of the standard library or of a package under ``site-packages``."""
    import sysconfig

    stdlib = sysconfig.get_paths().get("stdlib", "")
    parts = path.split("/")
    return "site-packages" in parts or "dist-packages" in parts or path.startswith(stdlib)
