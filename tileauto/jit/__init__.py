"""The kernel JIT: elaborate a factory, compile with TVM, call with torch tensors.

impl.py            ``@jit`` and JITImpl: compile once per arguments, ``par_compile`` through a Builder
kernel.py          JITKernel: a compiled kernel called with torch tensors
_call_plan.py      what a call needs (inputs, outputs, allocation paths), worked out at load
_kernel_threads.py the thread count a parallel CPU kernel runs with, on tileauto's or TVM's pool
compiler.py        elaborate, compile and export a kernel (the one place that builds)
target.py          resolving targets (TVM's compiler); target_memo.py the same without TVM
thread_pool.py     whether TVM's pool spins: the busy-machine rule
launcher.py        tileauto's thread pool for the parallel loops of CPU kernels
runtime.py         loading kernels with TVM's runtime alone
dtypes.py          TVM dtype names to torch dtypes
_elf.py            checking a kernel library's ELF headers before it is mapped

``tileauto.jit`` is this subpackage and the ``@jit`` decorator at once: the module is
callable (:func:`tileauto.jit.impl.jit`), because Python binds ``tileauto.jit`` to the
subpackage whenever one of its modules is imported. The names below load on first use, so
importing the package imports neither torch nor TVM's compiler.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CompileFailure": "tileauto.jit.impl",
    "JITImpl": "tileauto.jit.impl",
    "jit": "tileauto.jit.impl",
    "JITKernel": "tileauto.jit.kernel",
}

if TYPE_CHECKING:
    from tileauto.jit.impl import CompileFailure, JITImpl, jit
    from tileauto.jit.kernel import JITKernel


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tileauto.jit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _JitPackage(types.ModuleType):
    """The ``tileauto.jit`` module: a package that is also the ``@jit`` decorator."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tileauto.jit.impl import jit

        return jit(*args, **kwargs)

    @property
    def __signature__(self) -> Any:  # inspect.signature(tileauto.jit) is the decorator's
        import inspect

        from tileauto.jit.impl import jit

        return inspect.signature(jit)


sys.modules[__name__].__class__ = _JitPackage

__all__ = ["CompileFailure", "JITImpl", "JITKernel", "jit"]
