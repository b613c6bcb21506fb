"""Which installed code a module belongs to: the standard library, a distribution, tileauto.

A key names installed code by ``name==version`` instead of walking it (see
:mod:`tileauto.cache.key`); anything else is the user's code and is walked.

Which distributions provide a top-level package is known only by reading every installed
distribution's metadata (``importlib.metadata.packages_distributions``: a quarter of a second
in a virtualenv of 80 packages, more with more). So the answers are remembered on disk, in
``<cache>/installed/<state>.json``, where ``<state>`` hashes the environment's installed
distributions as the folders of ``sys.path`` list them (each ``*.dist-info`` / ``*.egg-info``
entry by name, which holds the version, and modification time): an install, an upgrade or an
uninstall is another state, so an answer cannot outlive what it describes. A warm process
lists those folders (a millisecond) and reads one small file (:mod:`tileauto.cache._memo`); a
process that meets a package not remembered yet scans once, and adds the answer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

from tileauto.cache._memo import Memo, memo_dir

MEMO_DIR = "installed"


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
    if "site-packages" in parts or "dist-packages" in parts or _beside_dist_info(file, top, root):
        return _distribution(root)
    if any(file.startswith(p) for p in _stdlib_dirs()):
        return _python()
    return None


def _beside_dist_info(file: str, top: Any, root: str) -> bool:
    """Whether a package lies in a folder that holds installed distributions' metadata
    (``pip install --target DIR`` with ``DIR`` on ``PYTHONPATH``, a container's or a bundle's
    library folder) and one of them provides it. Only ``*.dist-info`` counts: setuptools
    leaves a ``*.egg-info`` beside the user's own sources, which must still be walked."""
    path = Path(file)
    folder = path.parent.parent if getattr(top, "__path__", None) is not None else path.parent
    return _has_dist_info(str(folder)) and _known_distribution(root) is not None


@functools.lru_cache(maxsize=64)
def _has_dist_info(folder: str) -> bool:
    try:
        return any(name.endswith(".dist-info") for name in os.listdir(folder))
    except OSError:
        return False


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
    """Every top-level package's distributions: the scan of all installed metadata, done at
    most once per process and only when the memo does not know a package."""
    from importlib.metadata import packages_distributions

    return dict(packages_distributions())


@functools.lru_cache(maxsize=256)
def _distribution(root: str) -> str:
    """The versions of the distributions that provide the top-level package ``root``."""
    found = _known_distribution(root)
    if found is None:  # no distribution: the module's own version, which no state tracks
        return f"{root}=={getattr(sys.modules.get(root), '__version__', 'unknown')}"
    return found


def _known_distribution(root: str) -> str | None:
    """:func:`_distribution` from the memo or a scan; None where no distribution provides it."""
    memo = _memo()
    known = memo.get(root)
    if isinstance(known, str):
        return known
    found = _scan(root)
    if found is not None:
        memo.add(root, found)
    return found


def _scan(root: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist in sorted(set(_distributions().get(root, []))):
        try:
            found.append(f"{dist}=={version(dist)}")
        except PackageNotFoundError:
            continue
    return ",".join(found) if found else None


# -- the memo on disk -----------------------------------------------------------------------------
def environment_state() -> str:
    """A digest of the installed distributions as ``sys.path`` lists them now (see above)."""
    return _state_of(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _state_of(path: tuple[str, ...]) -> str:
    folders = []
    for entry in path:
        folder = os.path.abspath(entry or os.curdir)
        try:
            with os.scandir(folder) as it:
                listed = sorted(
                    (e.name, e.stat(follow_symlinks=False).st_mtime_ns)
                    for e in it
                    if e.name.endswith((".dist-info", ".egg-info"))
                )
        except OSError:  # a zip file or a missing folder: it holds no metadata folders here
            continue
        if listed:  # a folder of scripts (a script's own, the working directory) tells nothing
            folders.append([folder, listed])
    payload = {"python": sys.version, "path": folders}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _memo() -> Memo:
    return _memo_at(memo_dir(MEMO_DIR), environment_state())


@functools.lru_cache(maxsize=8)
def _memo_at(directory: Path | None, state: str) -> Memo:
    return Memo(directory / f"{state}.json" if directory is not None else None)


def module_of(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    if module is None:  # a method of a C type: its type's module
        module = getattr(getattr(obj, "__objclass__", None), "__module__", None)
    return module if isinstance(module, str) else "builtins"


def qualname(obj: Any) -> str:
    return f"{module_of(obj)}.{getattr(obj, '__qualname__', type(obj).__name__)}"
