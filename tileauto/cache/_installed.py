"""Which installed code a module belongs to: the standard library, a distribution, tileauto.

A key names installed code by ``name==version`` instead of walking it (see
:mod:`tileauto.cache.key`); anything else is the user's code and is walked.
"""

from __future__ import annotations

import functools
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any


def tileauto_version() -> str:
    # The package is loaded (this module is part of it); no import edge back to its root.
    return str(getattr(sys.modules.get("tileauto"), "__version__", "unknown"))


def library_of(module_name: Any, module: types.ModuleType | None = None) -> str | None:
    """``name==version`` of the installed code ``module_name`` belongs to; None for user code.

    Installed means the standard library, a package under a ``site-packages`` folder, or
    tileauto itself (whose version is in every key anyway). Anything else is the user's code
    (an editable install included) and is walked.
    """
    if not isinstance(module_name, str) or not module_name:
        return None
    root = module_name.partition(".")[0]
    if root == "tileauto":
        return f"tileauto=={tileauto_version()}"
    top = sys.modules.get(root, module)
    file = _file_of(top) if top is not None else None
    if file is None:
        builtin = root in getattr(sys, "stdlib_module_names", ()) or root == "builtins"
        return _python() if builtin else None
    parts = Path(file).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return _distribution(root)
    if any(file.startswith(p) for p in _stdlib_dirs()):
        return _python()
    return None


def _file_of(module: Any) -> str | None:
    file = getattr(module, "__file__", None)
    if not file:
        paths = list(getattr(module, "__path__", None) or [])  # a namespace package
        file = paths[0] if paths else None
    return str(file) if file else None


def _python() -> str:
    return "python==" + ".".join(str(v) for v in sys.version_info[:3])


@functools.lru_cache(maxsize=1)
def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(str(Path(paths[k]).resolve()) for k in ("stdlib", "platstdlib") if k in paths)


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    from importlib.metadata import packages_distributions

    return dict(packages_distributions())


@functools.lru_cache(maxsize=256)
def _distribution(root: str) -> str:
    """The versions of the distributions that provide the top-level package ``root``."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist in sorted(set(_distributions().get(root, []))):
        try:
            found.append(f"{dist}=={version(dist)}")
        except PackageNotFoundError:
            continue
    if found:
        return ",".join(found)
    return f"{root}=={getattr(sys.modules.get(root), '__version__', 'unknown')}"


def module_of(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    if module is None:  # a method of a C type: its type's module
        module = getattr(getattr(obj, "__objclass__", None), "__module__", None)
    return module if isinstance(module, str) else "builtins"


def qualname(obj: Any) -> str:
    return f"{module_of(obj)}.{getattr(obj, '__qualname__', type(obj).__name__)}"
