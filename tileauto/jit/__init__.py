"""The kernel JIT: elaborate a factory, compile with TVM, call with torch tensors.

``tileauto.jit`` is this subpackage and the ``@jit`` decorator at once: the module is
callable, and calling it is :func:`tileauto.jit.impl.jit`. Python binds ``tileauto.jit`` to
the subpackage whenever it is first imported (``import tileauto.jit.kernel`` does), so the
decorator has to be the module itself for ``@tileauto.jit(...)`` to work whatever was
imported first. The names below load on first use, so importing the package (or
:mod:`tileauto.jit.runtime`, which loads kernels) imports neither torch nor TVM's compiler.
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
