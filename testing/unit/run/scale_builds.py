"""Compiled configs of the integration tests' ``scale`` kernel, for unit tests of the run side."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tileauto.jit.compiler import compile_to_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from tune_kernels import scale, scale_jit  # noqa: E402


def build_modes(out: Path, n: int, modes: tuple[str, ...]) -> dict[str, Any]:
    """One compiled artifact per ``mode`` of ``scale(n, mode=...)``, in folders under ``out``."""
    return {
        mode: compile_to_dir(
            scale, (n,), {"mode": mode}, scale_jit.compile_args, out / mode, config={"mode": mode}
        )
        for mode in modes
    }
