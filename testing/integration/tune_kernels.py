"""Real LLVM kernels for the tuner's tests: one factory whose ``mode`` picks how a config behaves.

ok        B = A * 2, vectorized by ``vec`` (the only valid mode; vec changes speed)
slow      B = A * 2 computed ``repeat`` times over (valid, visibly slower)
compile   a schedule error at elaboration (compile_error)
wrong     B = A * 3 (mismatch)
partial   writes only the first half of B (mismatch: NaN left in the output)
tail      leaves the last 32 elements of B unwritten (0.8% of 4,000: under the 1% ratio)
raise     computes B, then fails a runtime assert (the call raises: run_error)
spill     writes 8 elements past the end of B (out_of_bounds, caught by canaries)
segfault  writes far outside B (the run worker dies with SIGSEGV)
hang      loops forever (timeout; the worker is killed)
hog       touches 3 GiB of scratch memory (out_of_memory under a smaller limit)
inplace   writes A * 2 into A and into B (a kernel that mutates its input)
"""

from __future__ import annotations

import tvm.s_tir as st
from tvm import te
from tvm.script import tirx as T

import tileauto


def _vector_scale(n: int, vec: int, factor: float, repeat: int = 1):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * factor, name="B")
    if repeat > 1:
        k = te.reduce_axis((0, repeat), name="k")
        B = te.compute((n,), lambda i: te.sum(A[i] * factor / repeat, axis=k), name="B")
    sch = st.Schedule(te.create_prim_func([A, B]))
    block = sch.get_sblock("B")
    loops = sch.get_loops(block)
    _, inner = sch.split(loops[0], [None, vec])
    if repeat == 1:
        sch.vectorize(inner)
    return sch.mod["main"]


def _script(n: int, mode: str):
    if mode == "partial":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n // 2):
                B[i] = A[i] * T.float32(2)

    elif mode == "tail":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n - 32):
                B[i] = A[i] * T.float32(2)

    elif mode == "raise":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n):
                B[i] = A[i] * T.float32(2)
            assert A[0] > T.float32(1e30), "deliberate runtime failure"

    elif mode == "spill":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n + 8):
                B[i] = A[i % n] * T.float32(2)

    elif mode == "segfault":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n):
                # 2**46 floats past B: beyond any user-space address (47 bits), so this
                # faults whatever the process has mapped (a nearer offset may land in memory)
                B[T.int64(i) + T.int64(70368744177664)] = A[i] * T.float32(2)

    elif mode == "hang":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n):
                B[i] = A[i] * T.float32(2)
            while B[0] == B[0] or B[0] != B[0]:
                B[1] = B[1] + T.float32(1)

    elif mode == "hog":
        big = 3 * 2**28  # 3 GiB of float32 scratch, every page touched

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            tmp = T.alloc_buffer((big,), "float32")
            for i in range(big):
                tmp[i] = A[i % n]
            for i in range(n):
                B[i] = tmp[i] * T.float32(2)

    elif mode == "inplace":

        @T.prim_func
        def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
            for i in range(n):
                A[i] = A[i] * T.float32(2)
                B[i] = A[i]

    else:
        raise ValueError(f"unknown mode {mode!r}")
    return main


def scale(n: int, vec: int = 8, mode: str = "ok", repeat: int = 1):
    """The test factory (undecorated)."""
    if mode == "ok":
        return _vector_scale(n, vec, 2.0)
    if mode == "slow":
        return _vector_scale(n, vec, 2.0, repeat=repeat)
    if mode == "wrong":
        return _vector_scale(n, vec, 3.0)
    if mode == "padded":  # takes and returns n + vec elements: other shapes than the default's
        return _vector_scale(n + vec, vec, 2.0)
    if mode == "compile":
        raise RuntimeError("this config cannot be scheduled (deliberate compile failure)")
    if mode == "exit":  # a factory that leaves the process, or pretends to be interrupted
        raise SystemExit(3)
    if mode == "interrupt":
        raise KeyboardInterrupt
    return _script(n, mode)


scale_jit = tileauto.jit(out_idx=[-1], target="llvm")(scale)


def inplace_scale(n: int, vec: int = 8):
    """B = 2 * A, and A is doubled in place too (no output allocated: out_idx=None)."""
    return _script(n, "inplace")


def scaled_by(n: int, vec: int = 8):
    """B = A * alpha with alpha a scalar parameter (passed by value)."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), alpha: T.float32, B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i] * alpha

    return main


def first_n(vec: int = 8):
    """B[:n] = A[:n] * 2 with the length n a scalar parameter that sizes both buffers."""

    @T.prim_func
    def main(a: T.handle, n: T.int32, b: T.handle):
        A = T.match_buffer(a, (n,), "float32")
        B = T.match_buffer(b, (n,), "float32")
        for i in range(n):
            B[i] = A[i] * T.float32(2)

    return main
