"""The ``tileauto`` command: the cache on the command line (list, show, verify, clear...).

command.py          the parser, ``main`` and the ``env`` verb
cache_commands.py   the ``cache`` verbs: list, show, verify, clear, export, import
base.py             exit codes, the one-line error, the settings, ages and sizes as text

It reads JSON and files and imports no torch/TVM.
"""

from tileauto.cli.command import main

__all__ = ["main"]
