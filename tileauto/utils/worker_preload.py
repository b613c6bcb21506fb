"""Imported once by the forkserver so that forked workers start with TVM and torch loaded.

Importing is safe before fork; *running* a torch op is not (libgomp deadlocks in children).
"""

from __future__ import annotations

import torch  # noqa: F401
import tvm  # noqa: F401

import tileauto.jit.compiler  # noqa: F401
