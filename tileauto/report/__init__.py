"""What a tuning tells the user: the table, the progress line, the trial log, notes, plots.

console.py    the Reporter protocol, the console reporter (progress bar, table) and the fan-out
log.py        the JSON-lines trial log, streamed as trials are measured, and its reader
table.py      the trial table and the failure summary, as plain text
observer.py   the on_trial callback, given detached and bounded copies of each trial
notes.py      one-line notes besides the report (a cache hit, a wait, a saved folder)
plot.py       a picture of the trials (matplotlib, optional)
"""

from __future__ import annotations

import importlib
from types import ModuleType

# ``tileauto.report.plot.plot_trials`` works after a plain ``import tileauto``, as the docs write it
_MODULES = frozenset({"console", "log", "notes", "observer", "plot", "table"})


def __getattr__(name: str) -> ModuleType:
    """Import a module of this package on first use (PEP 562)."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
