"""tileauto: a parallel compile-and-validate autotuner for TVM tile kernels.

import tileauto
import tileauto.language as T

@tileauto.autotune(configs=[{"block": 32}, {"block": 64}])
@tileauto.jit(out_idx=[-1])
def kernel(n, block=32): ...

Importing the package is cheap: each name below is imported the first time it is used
(PEP 562), so the ``tileauto`` command and a process that only loads tuned kernels do not pay
for the parts they never touch (torch, TVM's compiler). ``tileauto.jit`` is both the
decorator and the ``tileauto.jit`` subpackage (see :mod:`tileauto.jit`).
"""

from __future__ import annotations

# Nothing is imported at module level, not even ``typing`` (tens of milliseconds without
# bytecode caches): ``tileauto --help`` pays only for what it uses. Type checkers treat a
# name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False

__version__ = "0.1.0"

# public name -> the module that defines it (imported on first use)
_EXPORTS = {
    "AutoTuneImpl": "tileauto.api.decorator",
    "AutoTuner": "tileauto.api.builder",
    "autotune": "tileauto.api.decorator",
    "CacheError": "tileauto.errors",
    "CompileError": "tileauto.errors",
    "ConfigSpaceError": "tileauto.errors",
    "InputSupplyError": "tileauto.errors",
    "KernelArgumentError": "tileauto.errors",
    "NoValidConfigError": "tileauto.errors",
    "SettingsError": "tileauto.errors",
    "TileautoError": "tileauto.errors",
    "KernelParam": "tileauto.run.inputs",
    "TensorSupplyType": "tileauto.run.inputs",
    "set_autotune_inputs": "tileauto.run.inputs",
    "CompileFailure": "tileauto.jit",
    "JITImpl": "tileauto.jit",
    "JITKernel": "tileauto.jit",
    "CompileArgs": "tileauto.options",
    "ProfileArgs": "tileauto.options",
    "LatencyStats": "tileauto.records",
    "Trial": "tileauto.records",
    "TrialStatus": "tileauto.records",
    "Validation": "tileauto.records",
    "AutotuneResult": "tileauto.result.record",
    "Settings": "tileauto.settings",
    "TuningProblem": "tileauto.tune.problem",
    "TuningSession": "tileauto.tune.session",
    "MemoryStore": "tileauto.tune.stores",
    "torch_op": "tileauto.ops.torch_op",
}

# subpackages and modules the docs write as ``tileauto.X.Y`` after a plain ``import tileauto``
# (imported on first use, like the names above)
_SUBMODULES = frozenset(
    {
        "api",
        "artifact",
        "build",
        "cache",
        "cli",
        "errors",
        "jit",
        "language",
        "machine",
        "ops",
        "options",
        "records",
        "report",
        "result",
        "run",
        "scale",
        "search",
        "settings",
        "space",
        "testing",
        "tune",
        "utils",
        "workers",
    }
)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time the names load lazily
    from typing import Any

    from tileauto import jit
    from tileauto.api.builder import AutoTuner
    from tileauto.api.decorator import AutoTuneImpl, autotune
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
    from tileauto.jit import CompileFailure, JITImpl, JITKernel
    from tileauto.ops.torch_op import torch_op
    from tileauto.options import CompileArgs, ProfileArgs
    from tileauto.records import LatencyStats, Trial, TrialStatus, Validation
    from tileauto.result.record import AutotuneResult
    from tileauto.run.inputs import KernelParam, TensorSupplyType, set_autotune_inputs
    from tileauto.settings import Settings
    from tileauto.tune.problem import TuningProblem
    from tileauto.tune.session import TuningSession
    from tileauto.tune.stores import MemoryStore


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    import importlib

    if name in _SUBMODULES:
        # ``tileauto.space.product``: importing a subpackage binds it here (``tileauto.jit``
        # is the subpackage, callable as the decorator).
        return importlib.import_module(f"tileauto.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tileauto' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
    "Validation",
    "autotune",
    "set_autotune_inputs",
    "torch_op",
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
    "TuningProblem",
    "TuningSession",
    "MemoryStore",
    "__version__",
    "jit",
]
