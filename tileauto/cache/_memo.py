"""Small JSON memos under the cache folder: answers a key needs that are slow to work out.

Each memo file is named by a digest of what its answers depend on, so it cannot answer for
anything else: ``installed/<state>.json`` (which distribution provides a package, for one
state of the environment's installed distributions) and ``sources/<sha256>.json`` (the
normalized source of the functions of one source file's exact contents). A memo follows the
cache's rules: a private folder, files of this user's that nobody else can write, written
whole (renamed into place); one that is not is ignored and its answers worked out again. A
write that fails costs the next process the work, nothing else.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger

log = get_logger("cache")

FORMAT = 1


def memo_dir(name: str) -> Path | None:
    """``<cache>/<name>``, or None when the caches are off (nothing is written then)."""
    from tileauto.settings import Settings

    settings = Settings.from_env()
    if not (settings.tuning_cache_enabled or settings.kernel_cache_enabled):
        return None
    return settings.cache_dir / name


class Memo:
    """The answers of one memo file, read once, added to as they are worked out."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.known: dict[str, Any] = read(path) if path is not None else {}

    def get(self, name: str, default: Any = None) -> Any:
        return self.known.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.known

    def add(self, name: str, value: Any) -> None:
        self.known[name] = value
        if self.path is None:
            return
        merged = {**read(self.path), **self.known}  # what other processes added meanwhile
        try:
            write(self.path, merged)
        except OSError as exc:
            log.debug("memo %s not written: %s", self.path, exc)


def read(path: Path) -> dict[str, Any]:
    """The answers in ``path``; nothing when it is missing, unsafe, foreign or malformed."""
    from tileauto.cache.folders import read_own_json

    data = read_own_json(path, check_folder=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    answers = data.get("answers")
    return dict(answers) if isinstance(answers, dict) else {}


def write(path: Path, answers: dict[str, Any]) -> None:
    """Write ``answers`` to ``path`` whole (a private folder, a file of mode 600)."""
    from tileauto.cache.folders import make_private_dir

    make_private_dir(path.parent)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"format": FORMAT, "answers": answers}, f, sort_keys=True)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
