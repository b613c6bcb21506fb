"""Kernel factories for the jit tests: small real TVM CPU kernels (TE + s_tir.Schedule, TVMScript).

They live in a module of their own (not in the test file) so that compile workers can import
them by name, and the TVMScript ones are in a real file because the parser reads the source.
"""

from __future__ import annotations

import tvm
from tvm import s_tir, te

import tileauto.language as T


def vector_add(n: int, block: int = 16, dtype: str = "float32") -> tvm.tirx.PrimFunc:
    """``C = A + B`` on ``n`` elements; the loop is split by ``block`` and vectorized."""
    a = te.placeholder((n,), dtype, name="A")
    b = te.placeholder((n,), dtype, name="B")
    c = te.compute((n,), lambda i: a[i] + b[i], name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    (i,) = sch.get_loops(sch.get_sblock("C"))
    _, inner = sch.split(i, [None, block])  # a block < 1 is a ScheduleError: a failing config
    sch.vectorize(inner)
    return sch.mod["main"]


def slow_vector_add(n: int, block: int = 16, sleep_s: float = 0.0) -> tvm.tirx.PrimFunc:
    """:func:`vector_add` after ``sleep_s`` seconds: a compile still in flight when needed."""
    import time

    time.sleep(sleep_s)
    return vector_add(n, block)


def leaving_vector_add(n: int, block: int = 16, how: str = "") -> tvm.tirx.PrimFunc:
    """:func:`vector_add`, unless ``how`` says to leave another way: ``exit`` calls
    ``sys.exit(3)``, ``interrupt`` raises a bare ``KeyboardInterrupt``, ``blank`` an exception
    without a message."""
    import sys

    if how == "exit":
        sys.exit(3)
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "blank":
        raise RuntimeError()
    return vector_add(n, block)


def scale_shift(n: int, m: int, scale: float = 2.0, shift: float = 1.0) -> tvm.tirx.PrimFunc:
    """Two outputs from one input: ``B = A * scale``, ``C = A + shift`` on an (n, m) tensor."""
    a = te.placeholder((n, m), "float32", name="A")
    b = te.compute((n, m), lambda i, j: a[i, j] * tvm.tirx.const(scale, "float32"), name="B")
    c = te.compute((n, m), lambda i, j: a[i, j] + tvm.tirx.const(shift, "float32"), name="C")
    return te.create_prim_func([a, b, c])


def dyn_double(cols: int = 4) -> tvm.tirx.PrimFunc:
    """``B = 2 * A`` with A, B of symbolic shape (n, cols), n a ``te.var``."""
    n = te.var("n")
    a = te.placeholder((n, cols), "float32", name="A")
    b = te.compute((n, cols), lambda i, j: a[i, j] * tvm.tirx.const(2.0, "float32"), name="B")
    return te.create_prim_func([a, b])


def dyn_add() -> tvm.tirx.PrimFunc:
    """``C = A + B`` with all three of symbolic shape (n,): two inputs bind the same ``n``."""
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((n,), "float32", name="B")
    c = te.compute((n,), lambda i: a[i] + b[i], name="C")
    return te.create_prim_func([a, b, c])


def two_sizes_named_n(vec: int = 4) -> tvm.tirx.PrimFunc:
    """``S = 2 * A`` and ``T = [B, B]`` interleaved, A of length n and B of length n': two
    distinct size variables that are both called ``n`` (TVMScript prints them n and n_1)."""
    n, m = te.var("n"), te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((m,), "float32", name="B")
    s = te.compute((n,), lambda i: a[i] * tvm.tirx.const(2.0, "float32"), name="S")
    t = te.compute((m * 2,), lambda i: b[tvm.tirx.floordiv(i, 2)], name="T")
    sch = s_tir.Schedule(te.create_prim_func([a, b, s, t]))
    (i,) = sch.get_loops(sch.get_sblock("S"))
    sch.split(i, [None, vec])
    return sch.mod["main"]


def scalar_named_like_a_dim() -> tvm.tirx.PrimFunc:
    """``B[i] = A[0] + i`` for i < n, with A of length n' and n a scalar argument: the scalar and
    A's length are distinct size variables, both called ``n``."""
    n, m = te.var("n"), te.var("n")
    a = te.placeholder((m,), "float32", name="A")
    b = te.compute((n,), lambda i: a[0] + i.astype("float32"), name="B")
    return te.create_prim_func([a, n, b])


def add_scalar(n: int = 64, dtype: str = "int32") -> tvm.tirx.PrimFunc:
    """``B = A + k`` with ``k`` an integer scalar argument of ``dtype``."""
    a = te.placeholder((n,), dtype, name="A")
    k = te.var("k", dtype)
    b = te.compute((n,), lambda i: a[i] + k, name="B")
    return te.create_prim_func([a, k, b])


def add_scalars(count: int, n: int = 8) -> tvm.tirx.PrimFunc:
    """``B = A + k0 + ... + k(count-1)`` with ``count`` int32 scalar arguments after A."""
    a = te.placeholder((n,), "int32", name="A")
    ks = [te.var(f"k{j}", "int32") for j in range(count)]
    b = te.compute((n,), lambda i: a[i] + sum(ks[1:], ks[0]), name="B")
    return te.create_prim_func([a, *ks, b])


def scale_by(n: int = 8) -> tvm.tirx.PrimFunc:
    """``B = A * s`` on float32 with ``s`` a float32 scalar argument."""
    a = te.placeholder((n,), "float32", name="A")
    s = te.var("s", "float32")
    return te.create_prim_func([a, s, te.compute((n,), lambda i: a[i] * s, name="B")])


def keep_if(n: int = 8) -> tvm.tirx.PrimFunc:
    """``B = A if flag else 0`` on int32 with ``flag`` a bool scalar argument."""
    a = te.placeholder((n,), "int32", name="A")
    flag = te.var("flag", "bool")
    b = te.compute((n,), lambda i: tvm.tirx.Select(flag, a[i], 0), name="B")
    return te.create_prim_func([a, flag, b])


def length_by_value() -> tvm.tirx.PrimFunc:
    """``B = A * 2`` with A of length n and n also passed as a scalar after A."""
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    return te.create_prim_func([a, n, b])


def cast_int(n: int) -> tvm.tirx.PrimFunc:
    """``B = int32(A) * 3`` for float32 A: an output dtype different from the input's."""
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i].astype("int32") * 3, name="B")
    return te.create_prim_func([a, b])


def not_a_kernel(n: int) -> int:
    """A broken factory: it returns a number, not a PrimFunc."""
    return n


def always_fails(n: int, block: int = 4) -> tvm.tirx.PrimFunc:
    raise RuntimeError(f"factory refuses n={n}")


def asserts(n: int, block: int = 4) -> tvm.tirx.PrimFunc:
    """Bare asserts, as TileLang factories check their tiles: two that fail alike."""
    assert n % block == 0
    assert block <= 32
    return vector_add(n, block=block)


# -- TVMScript ----------------------------------------------------------------------------------

N = T.int32()


@T.prim_func
def _add_one_dyn(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
    for i in range(N):
        B[i] = A[i] + T.float32(1)


def script_add_one() -> tvm.tirx.PrimFunc:
    """TVMScript, symbolic length: ``B = A + 1``."""
    return _add_one_dyn


@T.prim_func(s_tir=True)
def _matvec_16(
    A: T.Buffer((16, 16), "float32"), x: T.Buffer((16,), "float32"), y: T.Buffer((16,), "float32")
):
    T.func_attr({"tirx.noalias": True})
    for i, k in T.grid(16, 16):
        with T.sblock("y"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                y[vi] = T.float32(0)
            y[vi] = y[vi] + A[vi, vk] * x[vk]


def script_matvec() -> tvm.IRModule:
    """TVMScript with blocks, returned inside an IRModule: ``y = A @ x`` for 16 x 16."""
    return tvm.IRModule({"matvec": _matvec_16})


@T.prim_func
def _vadd_cuda(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32")):
    bx = T.launch_thread("blockIdx.x", 32)
    tx = T.launch_thread("threadIdx.x", 128)
    B[bx * 128 + tx] = A[bx * 128 + tx] * T.float32(2)


def cuda_double() -> tvm.tirx.PrimFunc:
    """A thread-bound kernel (blockIdx/threadIdx): compiles to CUDA C without a GPU."""
    return _vadd_cuda


@T.prim_func
def _double_no_threads(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(64):
        B[i] = A[i] * T.float32(2)


def unbound_double() -> tvm.tirx.PrimFunc:
    """No thread bindings: for CUDA, TVM would silently build a host function."""
    return _double_no_threads


def unbound_output(n: int, unbound: bool = False) -> tvm.tirx.PrimFunc:
    """``B = A * 2``; ``unbound``: B's extent is a variable no input binds (it compiles, but no
    call can allocate B)."""
    a = te.placeholder((n,), "float32", name="A")
    m = te.var("m") if unbound else n
    b = te.compute((m,), lambda i: a[i] * tvm.tirx.const(2.0, "float32"), name="B")
    return te.create_prim_func([a, b])


@T.prim_func
def _drop_four(a: T.handle, b: T.handle):
    n = T.int32()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n - 4,), "float32")
    for i in range(n - 4):
        B[i] = A[i + 4]


def script_drop_four() -> tvm.tirx.PrimFunc:
    """TVMScript, an output extent that is an expression: ``B = A[4:]``."""
    return _drop_four


def cuda_add_k(n: int, threads: int = 128) -> tvm.tirx.PrimFunc:
    """``B = A + k`` on a CUDA device, ``k`` an int32 scalar passed by value."""
    a = te.placeholder((n,), "float32", name="A")
    k = te.var("k", "int32")
    b = te.compute((n,), lambda i: a[i] + k.astype("float32"), name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, k, b]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    bx, tx = sch.split(i, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch.mod["main"]
