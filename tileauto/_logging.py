"""Module loggers for tileauto. Handlers are the application's business, except the tuning log."""

from __future__ import annotations

import logging


def get_logger(name: str) -> logging.Logger:
    """Return the logger for a tileauto module (``tileauto.<name>``)."""
    if not name.startswith("tileauto"):
        name = f"tileauto.{name}"
    return logging.getLogger(name)


logging.getLogger("tileauto").addHandler(logging.NullHandler())
