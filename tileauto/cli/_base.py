"""What every ``tileauto`` command shares: exit codes, errors, settings, ages and sizes.

A command's error is one line and an exit code; its settings are ``TILEAUTO_*`` with
``--cache-dir`` on top; ages, sizes and tables are printed as plain text.
"""

from __future__ import annotations

import argparse
import re

# ``tileauto --help`` and the cache verbs import only what they use: no torch, no TVM, and
# not even ``typing`` or ``pathlib`` before a verb needs them. Type checkers treat a name
# ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_PIPE = 141  # the reader of stdout went away (| head): 128 + SIGPIPE, as other tools
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class CommandError(Exception):
    """An error the command reports in one line, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


def settings_of(args: argparse.Namespace, *, reading: bool = False) -> Any:
    """The ``TILEAUTO_*`` settings with ``--cache-dir`` on top. ``reading``: the command reads
    (or deletes from) the cache, so a ``--cache-dir`` that does not exist is an error (a typo
    would otherwise read as an empty cache): a usage error (exit 2), as an empty
    ``--cache-dir`` or one that names a file is; a command that writes makes it."""
    from tileauto.errors import SettingsError
    from tileauto.settings import Settings, parse_folder

    try:
        settings = Settings.from_env()
        given = getattr(args, "cache_dir", None)
        if given is None:
            return settings
        # empty (an unset shell variable) is an error, never the default cache
        cache_dir = parse_folder("--cache-dir", given)
    except SettingsError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    if reading and not cache_dir.is_dir():  # a usage error, as an empty one or a file is
        raise CommandError(
            f"--cache-dir {given!r}: no such folder ({cache_dir}); expected the cache's folder",
            EXIT_USAGE,
        )
    import dataclasses

    return dataclasses.replace(settings, cache_dir=cache_dir)


def parse_age(text: str) -> float:
    """``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"``, in seconds. A number without its
    unit is refused: ``--older-than 30`` meant as days would delete nearly everything."""
    m = _AGE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: use a number with s, m, h, d or w (e.g. 7d, 12h, 30m)"
        )
    if not m.group(2):
        raise argparse.ArgumentTypeError(
            f"{text!r} has no unit: write {m.group(1)}d for days, {m.group(1)}h for hours, "
            f"{m.group(1)}m for minutes or {m.group(1)}s for seconds"
        )
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


def format_age(seconds: float) -> str:
    """An age in its largest whole unit: ``"3d"``, ``"5h"``, ``"12m"``, ``"40s"``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def format_size(n: int) -> str:
    """A size in bytes as ``"512 B"``, ``"1.5 KiB"`` ... ``"2.0 GiB"``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def text_table(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows as left-aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
