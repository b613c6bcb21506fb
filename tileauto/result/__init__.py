"""What a tuning returns and how it travels.

record.py       AutotuneResult: the best config, its kernel and latency, every trial
summary.py      TuningResult: the cuTile-style view (best, successes, failures)
shipping.py     save_to_disk / load_from_disk of a result folder
_portability.py whether a stored kernel runs here, and compiling it again when not
_origin.py      the folder a loaded result came from, and whether its kernel files changed since
_staging.py     a save's staging folder beside its destination, and those killed saves left
_values.py      the user's tuples given back to stored trials (for load_from_disk and the CLI)
"""

from __future__ import annotations

import importlib
from types import ModuleType

# ``tileauto.result.record.AutotuneResult`` works after a plain ``import tileauto``, as the docs write it
_MODULES = frozenset({"record", "shipping", "summary"})


def __getattr__(name: str) -> ModuleType:
    """Import a module of this package on first use (PEP 562)."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
