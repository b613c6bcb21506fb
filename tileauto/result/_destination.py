"""Where ``save_to_disk`` writes: what it may replace, and why it refuses anything else.

A save replaces nothing but a saved result that holds only its own files (its manifest's, the
folders above them, and what a save writes). A folder of the user's that merely holds a
``manifest.json``, or a saved result the user added files to, is refused, named, and left as
it is; so are a file and a symbolic link.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def refused_destination(path: Path) -> str | None:
    """Why ``save_to_disk`` must not replace what is at ``path``, and what to do; None when
    nothing is there, an empty folder, or a saved result that holds nothing but its own files."""
    from tileauto.cache import disk

    untouched = "nothing was written and it is left as it is. Give a new or empty folder"
    kind = disk.path_kind(path)  # an OSError: the save's own, naming the path
    if kind == "missing":
        return None
    if kind != "folder":
        return (
            f"a {'symbolic link' if kind == 'link' else 'file'} is there, not a folder; {untouched}"
        )
    try:
        names = _tree(path)
    except OSError as exc:
        return f"the folder cannot be read ({exc.strerror or exc}); {untouched}"
    if not names:
        return None
    own, why = _own_files(path)
    if why is not None:
        return (
            f"the folder is not a saved tileauto result ({why}) and holds {_few(names)}; "
            f"{untouched}"
        )
    foreign = [name for name in names if name not in own]
    if foreign:
        return (
            f"the folder holds a saved tileauto result and more ({_few(foreign)}), which "
            f"replacing the result would delete; {untouched}, or move those out of it"
        )
    return None


def _tree(path: Path) -> list[str]:
    """Every file and folder under ``path``, relative to it, a folder's name ending in ``/``
    (links listed, never followed)."""
    names = []
    for dirpath, dirnames, filenames in os.walk(path, onerror=_raise):
        top = Path(dirpath).relative_to(path)
        names += [f"{(top / name).as_posix()}/" for name in dirnames]
        names += [(top / name).as_posix() for name in filenames]
    return sorted(names)


def _raise(exc: OSError) -> None:
    raise exc


def _own_files(path: Path) -> tuple[set[str], str | None]:
    """The paths a saved result at ``path`` owns (its manifest's files, the folders above them,
    and the files a save writes), or why its manifest is not a saved result's."""
    from tileauto.cache.disk import KNOWN_FORMATS, MANIFEST
    from tileauto.cache.entry import KIND_TUNED, REQUIRED_TUNED

    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return set(), f"no {MANIFEST}"
    except (OSError, ValueError) as exc:
        return set(), f"its {MANIFEST} is unreadable: {exc}"
    if not isinstance(manifest, dict):
        return set(), f"its {MANIFEST} is not a JSON object"
    kind, version = manifest.get("kind"), manifest.get("format")
    if kind != KIND_TUNED or str(version) not in KNOWN_FORMATS:
        return set(), f"its {MANIFEST} is not a tuned result's: kind {kind!r}, format {version!r}"
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(name, str) for name in files):
        return set(), f"its {MANIFEST} lists no files"
    own = {MANIFEST, "problem.json", *REQUIRED_TUNED, *_kernel_files(), *files}
    for name in list(own):
        own.update(f"{parent.as_posix()}/" for parent in Path(name).parents if parent.name)
    return own, None


def _kernel_files() -> tuple[str, ...]:
    """The files a save writes in ``kernel/``."""
    from tileauto.artifact import KernelArtifact
    from tileauto.cache.entry import KERNEL_DIR

    names = (*KernelArtifact.FILES, KernelArtifact.META)
    return tuple(f"{KERNEL_DIR}/{name}" for name in names)


def _few(names: list[str], shown: int = 5) -> str:
    """The first of these paths (a folder's own, not what it holds), and how many more."""
    folders = {name for name in names if name.endswith("/")}
    tops = [n for n in names if not any(f"{p.as_posix()}/" in folders for p in Path(n).parents)]
    more = f" and {len(tops) - shown} more" if len(tops) > shown else ""
    return ", ".join(tops[:shown]) + more
