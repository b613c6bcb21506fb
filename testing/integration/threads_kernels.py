"""A parallel CPU kernel tuned, then called, in a fresh process: which thread count it runs with.

Run as a script by ``test_kernel_threads.py``: ``python threads_kernels.py [num_threads]``
tunes (or loads from the cache in ``TILEAUTO_CACHE_DIR``) a row-parallel ``B = A * 2`` and
prints one JSON line: the cache hit, the kernel's thread count, which pool ran its parallel
loop and the count that pool runs with after a call (tileauto's, ``tileauto.jit.launcher``,
unless ``TILEAUTO_THREAD_POOL=tvm``: then TVM's pool of this thread), how many parallel
regions tileauto's pool ran, ``TVM_NUM_THREADS`` before and after, and the same for
``TVM_THREAD_POOL_SPIN_COUNT`` with the busy-machine rule's decision (``tileauto.jit.thread_pool``).
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import tvm.s_tir as st
from tvm import te

ROWS, COLS = 64, 1024


def scale(rows: int = ROWS, cols: int = COLS, vec: int = 8) -> object:
    """``B = A * 2`` with the rows split across TVM's thread pool."""
    A = te.placeholder((rows, cols), "float32", name="A")
    B = te.compute((rows, cols), lambda i, j: A[i, j] * 2.0, name="B")
    sch = st.Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_sblock("B"))
    sch.parallel(i)
    _, inner = sch.split(j, [None, vec])
    sch.vectorize(inner)
    return sch.mod["main"]


def main() -> int:
    env_before = os.environ.get("TVM_NUM_THREADS")
    spin_before = os.environ.get("TVM_THREAD_POOL_SPIN_COUNT")
    import torch
    import tvm

    import tileauto
    from tileauto.jit import launcher
    from tileauto.jit.thread_pool import current_decision

    args = [a for a in sys.argv[1:] if a != "--early-pool"]
    option = int(args[0]) if args else None
    if "--early-pool" in sys.argv:
        tvm.runtime.num_threads()  # starts this thread's pool (TVM's default size) too early
    warnings.simplefilter("always")
    kernel_factory = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}], warmup=1, rep=3, num_threads=option, verbose=False
    )(tileauto.jit(out_idx=[-1], target="llvm")(scale))
    a = torch.randn(ROWS, COLS)
    with warnings.catch_warnings(record=True) as caught:
        kernel = kernel_factory(ROWS, COLS)
    before = launcher.stats().get("launches", 0)
    out = kernel(a)
    launches = launcher.stats().get("launches", 0) - before
    tileauto_pool = kernel.thread_pool == "tileauto"
    result = kernel_factory.get_tuner_result(ROWS, COLS)
    print(
        json.dumps(
            {
                "cache_hit": bool(result.cache_hit),
                "kernel_threads": kernel.num_threads,
                "pool": kernel.thread_pool,
                "pool_threads": launcher.threads() if tileauto_pool else tvm.runtime.num_threads(),
                "launches": launches,
                "env_before": env_before,
                "env_after": os.environ.get("TVM_NUM_THREADS"),
                "spin_before": spin_before,
                "spin_after": os.environ.get("TVM_THREAD_POOL_SPIN_COUNT"),
                "spin_rule": getattr(current_decision(), "source", None),
                "correct": bool(torch.equal(out, a * 2)),
                "warned": any("thread pool" in str(w.message) for w in caught),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
