"""Small real TVM kernels for the cache tests (factories must live in files: TVM reads sources).

Each factory is a TE computation scheduled with ``tvm.s_tir.Schedule``; they compile in tens of
milliseconds so a test can tune a handful of configs in a few seconds.
"""

from __future__ import annotations

import tvm
from tvm import s_tir, te

import tileauto

SCALE = 2.0  # a module global the factories read: part of their cache key


def scale_add(n: int, block: int = 16, unroll: bool = False, dtype: str = "float32"):
    """``B = A * SCALE + 1`` over ``n`` elements, split by ``block``."""
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: A[i] * tvm.tirx.const(SCALE, dtype) + 1, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    _, inner = sch.split(i, [None, block])
    if unroll:
        sch.unroll(inner)
    return sch.mod["main"]


def tuple_scale_add(n: int, tile: tuple = (16, False), dtype: str = "float32"):
    """:func:`scale_add` with its block and unroll in one tuple (a value JSON makes a list)."""
    if not isinstance(tile, tuple):
        raise TypeError(f"tile must come as the tuple the configs give, got {tile!r}")
    return scale_add(n, tile[0], tile[1], dtype)


def shaped_scale_add(shape: tuple, tile: tuple = (16, False)):
    """:func:`tuple_scale_add` over ``shape[0]`` elements: a call argument that is a tuple."""
    if not isinstance(shape, tuple):
        raise TypeError(f"shape must come as the tuple the call gives, got {shape!r}")
    return tuple_scale_add(shape[0], tile)


def broken_scale_add(n: int, block: int = 16, wrong: bool = False, dtype: str = "float32"):
    """Like :func:`scale_add`, but ``wrong=True`` computes ``A * SCALE`` (fails validation)."""
    A = te.placeholder((n,), dtype, name="A")
    one = 0 if wrong else 1
    B = te.compute((n,), lambda i: A[i] * tvm.tirx.const(SCALE, dtype) + one, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, block])
    return sch.mod["main"]


def matmul(M: int, N: int, K: int, bm: int = 8, bn: int = 8, dtype: str = "float32"):
    """``C = A @ B`` tiled by ``bm x bn``."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    io, ii = sch.split(i, [None, bm])
    jo, ji = sch.split(j, [None, bn])
    sch.reorder(io, jo, kk, ii, ji)
    return sch.mod["main"]


jit_scale_add = tileauto.jit(out_idx=[-1], target="llvm")(scale_add)
jit_matmul = tileauto.jit(out_idx=[-1], target="llvm")(matmul)

SCALE_ADD_CONFIGS = [{"block": 8}, {"block": 16}, {"block": 32, "unroll": True}]


def ref_scale_add(A):
    """Reference for :func:`scale_add`."""
    return A * SCALE + 1


def supply_scale_add(params):
    """Deterministic inputs for :func:`scale_add` (one tensor per input)."""
    import torch

    n = params[0].shape[0]
    return [torch.arange(n, dtype=torch.float32) / n]


# -- a child process for the multi-process tests ---------------------------------------------------
def tune_scale_add(n: int = 1024, configs=None, **profile):
    """Tune :func:`scale_add` with the builder API (small warmup/rep, quiet)."""
    tuner = tileauto.AutoTuner.from_kernel(scale_add, configs or SCALE_ADD_CONFIGS)
    tuner.args = (n,)
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    tuner.set_profile_args(**{"warmup": 1, "rep": 3, **profile})
    return tuner.run(verbose=False)


def _wait_for_peers(barrier: str, peers: int) -> None:
    """Start tuning only when every peer process is ready (so that they really overlap)."""
    import os
    import time
    from pathlib import Path

    Path(barrier, f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while len(list(Path(barrier).glob("ready-*"))) < peers and time.monotonic() < deadline:
        time.sleep(0.02)


def child_main(argv=None) -> None:
    """``python -c 'import cache_kernels; cache_kernels.child_main()' MODE [PATH]``.

    Modes: ``tune`` (tune scale_add and compile a @jit matmul; ``PATH``: save the result
    there), ``load`` (``load_from_disk(PATH)``), ``race BARRIER PEERS`` (tune once all peers
    are ready). Prints one JSON line: whether it hit the cache, how many compiles this process
    ran, whether any worker process was started, and whether the kernels compute right.
    """
    import json
    import sys

    import psutil
    import torch

    from tileauto.jit import compiler
    from tileauto.workers.pool import WorkerPool

    argv = list(sys.argv[1:] if argv is None else argv)
    mode = argv[0]
    out = {"mode": mode}
    a = torch.rand(1024)
    if mode == "load":
        result = tileauto.AutotuneResult.load_from_disk(argv[1])
    else:
        if mode == "race":
            _wait_for_peers(argv[1], int(argv[2]))
        result = tune_scale_add()
        mm = jit_matmul(32, 32, 32, bm=4, bn=8)
        x, y = torch.rand(32, 32), torch.rand(32, 32)
        out["matmul_ok"] = bool(torch.allclose(mm(x, y), x @ y, atol=1e-4))
        if mode == "tune" and len(argv) > 1:
            result.save_to_disk(argv[1])
    out.update(
        cache_hit=result.cache_hit,
        config=result.config,
        key=result.key,
        ok=bool(torch.allclose(result.kernel(a), ref_scale_add(a))),
        compiles=compiler.COMPILES.count,
        workers=len(WorkerPool.shared().workers) + len(psutil.Process().children(recursive=True)),
    )
    print("RESULT " + json.dumps(out), flush=True)
