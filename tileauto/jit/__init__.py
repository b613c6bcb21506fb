"""The kernel JIT: elaborate a factory, compile with TVM, call with torch tensors."""

from tileauto.jit.impl import CompileFailure, JITImpl, jit
from tileauto.jit.kernel import JITKernel

__all__ = ["CompileFailure", "JITImpl", "JITKernel", "jit"]
