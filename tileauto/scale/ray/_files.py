"""What travels from the driver to a node: its settings, and kernel folders as bytes.

A node that sees the driver's files (:meth:`RayCluster.share_files`) reads and writes kernel
folders in place; another gets them as bytes.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

# files of a kernel folder a run does not need
_READ_ONLY_FILES = ("_source.txt", "kernel_script.py")


# the fleet's Redis is the driver's alone: a compile task or a run actor never reads it, and
# its address (which may hold a password), password and signing key must not travel with
# every task (Ray keeps a task's arguments in its object store, on other machines)
_DRIVER_ONLY = ("TILEAUTO_REMOTE_CACHE",)


def settings_env() -> dict[str, str]:
    """The driver's ``TILEAUTO_*`` variables that a node needs: all but its secrets and the
    fleet's Redis address."""
    kept = {k: v for k, v in os.environ.items() if k.startswith("TILEAUTO_")}
    for name in (*_DRIVER_ONLY, *_secret_names()):
        kept.pop(name, None)
    return kept


def _secret_names() -> tuple[str, ...]:
    """Every variable the settings mark secret (a password, the signing key), aliases too."""
    from tileauto.settings import Settings

    return tuple(
        name
        for f in dataclasses.fields(Settings)
        if f.metadata.get("secret")
        for name in (f.metadata["env"], *f.metadata.get("also", ()))
    )


def apply_settings(env: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith("TILEAUTO_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)


def folder_files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def shares_files(token: tuple[str, str] | None) -> bool:
    """On a node: whether it sees the driver's files (the token file reads back)."""
    if token is None:
        return False
    try:
        return Path(token[0]).read_text() == token[1]
    except OSError:
        return False


def run_files(directory: Path) -> dict[str, bytes]:
    """What a run needs of a kernel folder: the library and its record, not the sources
    (kept for people to read: most of the folder's bytes)."""
    return {
        name: data
        for name, data in folder_files(directory).items()
        if not name.endswith(_READ_ONLY_FILES)
    }


def write_files(directory: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
