"""The one exception hierarchy of tileauto.

Inside a tuning run failures travel as data (:class:`tileauto.records.TrialStatus`); the
exceptions below are what a caller sees. Each message says what was wrong, what was expected
and how to fix it.
"""

from __future__ import annotations


class TileautoError(Exception):
    """Base class of every error tileauto raises on purpose."""


class SettingsError(TileautoError, ValueError):
    """A ``TILEAUTO_*`` environment variable holds a value that cannot be used."""


class KernelArgumentError(TileautoError, ValueError):
    """A JITKernel was called with arguments that do not match its parameters."""


class CompileError(TileautoError):
    """Elaborating or compiling a kernel factory failed."""


class ConfigSpaceError(TileautoError, ValueError):
    """The tuning space is empty or names parameters the factory does not have."""


class InputSupplyError(TileautoError, ValueError):
    """Inputs for tuning cannot be produced (for example symbolic shapes with no inputs)."""


class NoValidConfigError(TileautoError):
    """No config of a tuning run passed; the message lists every config's reason."""

    def __init__(self, message: str, trials: tuple = ()) -> None:
        super().__init__(message)
        self.trials = trials


class WorkerError(TileautoError):
    """A worker process died or stopped answering."""


class CacheError(TileautoError):
    """A cache entry could not be read or written (reported, never fatal to tuning)."""


class TorchOpError(TileautoError, ValueError):
    """A ``torch_op`` that cannot be made or called as asked; the message says how to fix it."""
