"""Where a loaded result's kernel files are, and whether they are still the ones it was loaded with.

A result read from a saved folder or a cache entry runs the library it loaded, but its kernel
still points at that folder's ``kernel/``, which another save or tuning may replace while the
result lives. A save copies the kernel's files from there: it must copy the very files the
result was loaded with (their sha256 as the manifest gave them at load), not a newer tuning's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileauto.artifact import KernelArtifact


@dataclass(frozen=True)
class KernelOrigin:
    """The folder a result was read from, and the sha256 of its kernel's files then.

    Attributes:
        folder: the saved folder or cache entry the result was read from.
        kernel_dir: its ``kernel/`` folder, which the result's kernel points at.
        in_cache: whether ``folder`` is a tuning cache entry (``autotuner/<key>``) rather than a
            folder ``save_to_disk`` wrote: for messages that guess why a file went.
        sha256: each of :attr:`KernelArtifact.FILES <tileauto.artifact.KernelArtifact.FILES>`
            by name: its sha256 as the manifest listed it at load, None when the folder held
            none. None (the whole map) when the result's kernel is not that folder's (it was
            compiled again at load).
    """

    folder: Path
    kernel_dir: Path
    in_cache: bool
    sha256: Mapping[str, str | None] | None

    def where(self) -> str:
        """``the folder <path>`` or ``its cache entry <path>``, for messages."""
        return f"its cache entry {self.folder}" if self.in_cache else f"the folder {self.folder}"


def origin_of(stored: Any, kernel: Any) -> KernelOrigin:
    """The origin of a result made of ``stored`` (a :class:`~tileauto.cache.entry.StoredResult`)
    and its loaded ``kernel``."""
    from tileauto.cache.disk import is_entry_key
    from tileauto.cache.entry import KERNEL_DIR, KIND_TUNED

    folder = Path(stored.path)
    artifact = getattr(kernel, "artifact", None)
    own = artifact is not None and Path(artifact.directory) == Path(stored.artifact.directory)
    files = stored.manifest.get("files")
    files = files if isinstance(files, dict) else {}
    sha256 = None
    if own:
        listed = {name: files.get(f"{KERNEL_DIR}/{name}") for name in KernelArtifact.FILES}
        sha256 = {name: value if isinstance(value, str) else None for name, value in listed.items()}
    in_cache = folder.parent.name == KIND_TUNED and is_entry_key(folder.name)
    kernel_dir = Path(stored.artifact.directory)
    return KernelOrigin(folder=folder, kernel_dir=kernel_dir, in_cache=in_cache, sha256=sha256)


def changed_files(expected: Mapping[str, str | None], directory: Path) -> list[str]:
    """The names in ``expected`` whose file in ``directory`` is not the one it records: another
    sha256, unreadable, gone, or there where none was (None)."""
    from tileauto.cache.disk import sha256_file

    changed = []
    for name, want in expected.items():
        path = Path(directory) / name
        try:
            got: str | None = sha256_file(path)
        except FileNotFoundError:
            got = None
        except OSError:
            got = ""  # unreadable, or no longer a plain file: not the file it was
        if got != want:
            changed.append(name)
    return changed
