"""What tileauto tells the user besides the report table: a cache hit, a wait, a saved folder.

Every message is logged (``logging``, logger ``tileauto.console``) and, when the caller asked
for output (``verbose``), written to stderr, where diagnostics belong; the report table of a
tuning goes to stdout (see :mod:`tileauto.report.console`).
"""

from __future__ import annotations

import sys

from tileauto._logging import get_logger

log = get_logger("console")


def note(message: str, *, show: bool = True) -> None:
    """Log ``message``; also write it to stderr when ``show``."""
    log.info("%s", message)
    if show:
        print(message, file=sys.stderr, flush=True)
