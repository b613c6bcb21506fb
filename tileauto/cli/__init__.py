"""The ``tileauto`` command: the cache on the command line (list, show, verify, clear...).

_command.py         the parser, ``main`` and the ``env`` verb
_cache_commands.py  the ``cache`` verbs: list, show, verify, clear, export, import
_base.py            exit codes, the one-line error, the settings, ages and sizes as text

It reads JSON and files and imports no torch/TVM.
"""

from tileauto.cli._command import main

__all__ = ["main"]
