"""The ``tileauto`` command: the cache on the command line (list, show, verify, clear...).

commands.py   the parser and each command; it reads JSON and files, imports no torch/TVM
"""

from tileauto.cli.commands import main

__all__ = ["main"]
