"""The ``on_trial`` observer: each trial handed to the user's callback, detached and bounded.

The callback gets its own copy of every trial, so changing it changes nothing in the tuning,
with ``error`` cut to :data:`ERROR_CHARS` characters. A callback that raises, or a trial that
cannot be copied for it, is reported once (a ``RuntimeWarning``, and a warning on the
``tileauto`` logger) and the callback is not called again (TileLang's contract). A cache hit
is told as one marker trial (``cache_hit=True``): the stored winner, never a measurement of
this run.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tileauto._logging import get_logger
from tileauto.records import Trial, TrialStatus

log = get_logger("observer")

ERROR_CHARS = 2048  # the most characters of error text an observer is given (as TileLang)


class TrialObserver:
    """Calls ``callback(trial)`` with detached trials until the callback fails once.

    Args:
        callback: the user's ``on_trial`` (None: nothing is observed).
        name: the kernel's name, for the one warning about a broken callback.

    Attributes:
        switched_off: True once the callback raised or a trial could not be copied for it.
    """

    def __init__(self, callback: Callable[[Trial], Any] | None, name: str = "kernel") -> None:
        self.callback = callback
        self.name = name
        self.switched_off = False

    @property
    def active(self) -> bool:
        return self.callback is not None and not self.switched_off

    def trial(self, trial: Trial) -> None:
        """Hand a copy of ``trial`` to the callback (nothing once it is switched off)."""
        if not self.active:
            return
        assert self.callback is not None
        try:
            mine = detached(trial)
        except Exception as exc:  # noqa: BLE001 - a config that will not copy must not stop tuning
            self._switch_off(f"trial {trial.index} could not be copied for it ({_describe(exc)})")
            return
        try:
            self.callback(mine)
        except Exception as exc:  # noqa: BLE001 - a progress callback must not stop tuning
            self._switch_off(f"raised {_describe(exc)}")

    def cache_hit(self, result: Any) -> None:
        """Tell the callback that a cache answered, with the marker trial of ``result``."""
        if self.active:
            self.trial(cache_hit_marker(result))

    def _switch_off(self, why: str) -> None:
        self.switched_off = True
        message = (
            f"autotune {self.name}: on_trial {why}; it is switched off and not called again "
            "(tuning goes on)"
        )
        log.warning("%s", message)  # in the logs of whoever set up logging
        # and seen by everyone else: the tileauto logger has only a NullHandler by default
        warnings.warn(message, RuntimeWarning, stacklevel=2)


def detached(trial: Trial) -> Trial:
    """A copy of ``trial`` that shares nothing mutable with it, its error cut to ERROR_CHARS."""
    return replace(trial, config=copy.deepcopy(trial.config), error=bounded(trial.error))


def bounded(text: str | None, limit: int = ERROR_CHARS) -> str | None:
    """``text`` cut to at most ``limit`` characters, saying how long it was."""
    if text is None or len(text) <= limit:
        return text
    marker = f"\n... [cut: {len(text)} characters in all]"
    return text[: max(0, limit - len(marker))] + marker


def cache_hit_marker(result: Any) -> Trial:
    """The trial an observer gets when ``result`` came from a cache: its winner, marked."""
    best = result.best_trial
    if best is not None:
        return replace(best, cache_hit=True)
    return Trial(-1, dict(result.config), TrialStatus.OK, cache_hit=True)


def _describe(exc: BaseException) -> str:
    return bounded(f"{type(exc).__name__}: {exc}") or ""
