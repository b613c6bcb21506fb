"""Kernels for the warm start tests: a module that imports no part of TVM when it is imported.

``import tileauto.language as T`` is lazy, and the TVMScript is written inside the factory, so
TVM's compiler is imported when a factory is first elaborated, never by loading a tuned kernel.
The kernel has a parallel loop: loading it needs TVM's runtime library (its thread pool).
"""

from __future__ import annotations

import tileauto
import tileauto.language as T

N = 4096
CONFIGS = [{"block": 64}, {"block": 256}]


def double(n: int, block: int = 128):
    """``B = 2 * A`` over ``n`` floats, ``n / block`` parallel tasks of ``block`` elements."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in T.parallel(n // block):
            for j in T.serial(block):
                B[i * block + j] = A[i * block + j] * T.float32(2)

    return main


jit_double = tileauto.jit(out_idx=[-1], target="llvm")(double)
tuned_double = tileauto.autotune(configs=CONFIGS, warmup=1, rep=5, verbose=False)(jit_double)
