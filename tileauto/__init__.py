"""tileauto: a parallel compile-and-validate autotuner for TVM tile kernels.

import tileauto
import tileauto.language as T

@tileauto.autotune(configs=[{"block": 32}, {"block": 64}])
@tileauto.jit(out_idx=[-1])
def kernel(n, block=32): ...
"""

from __future__ import annotations

from tileauto.autotuner import AutoTuneImpl, AutoTuner, autotune
from tileauto.errors import (
    CacheError,
    CompileError,
    ConfigSpaceError,
    InputSupplyError,
    KernelArgumentError,
    NoValidConfigError,
    SettingsError,
    TileautoError,
)
from tileauto.inputs import KernelParam, TensorSupplyType, set_autotune_inputs
from tileauto.jit import CompileFailure, JITImpl, JITKernel, jit
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.result import AutotuneResult
from tileauto.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "AutoTuneImpl",
    "AutoTuner",
    "AutotuneResult",
    "CompileArgs",
    "KernelParam",
    "ProfileArgs",
    "LatencyStats",
    "TensorSupplyType",
    "Trial",
    "TrialStatus",
    "autotune",
    "set_autotune_inputs",
    "CacheError",
    "CompileError",
    "CompileFailure",
    "ConfigSpaceError",
    "InputSupplyError",
    "JITImpl",
    "JITKernel",
    "KernelArgumentError",
    "NoValidConfigError",
    "Settings",
    "SettingsError",
    "TileautoError",
    "__version__",
    "jit",
]
