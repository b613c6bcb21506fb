"""Imported once by the forkserver so that forked workers start with TVM and torch loaded.

Importing is safe before fork; *running* a torch op is not (libgomp deadlocks in children).
"""

from __future__ import annotations

import torch  # noqa: F401

from tileauto.jit.compiler import load_compiler

load_compiler()
