"""Tiled fp32 GEMM for the CPU: ``C = A @ B`` with A (M, K) and B (K, N), both row-major.

The factory builds the kernel with TE and schedules it with ``tvm.s_tir.Schedule``:

* **B is packed** into panels ``Bp[N / block_N, K, block_N]`` (zero-padded), so the inner loop
  reads B contiguously instead of with a stride of N floats;
* **cache blocking**: the output is split into ``block_M x block_N`` tiles, one parallel task
  each, and the reduction into ``block_K`` slices, so a slice of A and of Bp stays in cache;
* **register blocking**: inside a tile, ``micro_M x micro_N`` sub-tiles of C live in a local
  buffer that LLVM keeps in vector registers while ``k`` runs; the ``micro_N`` columns are
  ``micro_N / vec`` vectors of ``vec`` lanes, and the ``k`` loop is unrolled ``unroll`` times.

Sizes that the tiles do not divide are supported: the computation runs on zero-padded
extents (A rows are clamped, B is padded while packing) and only the valid part of C is
written back. Run ``python examples/gemm_cpu.py --size 512`` to check it against
``torch.matmul`` and to see how much the configs differ (as a script it sets
``TVM_NUM_THREADS`` to the number of cores unless it is set).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import _common
import torch

import tileauto

if TYPE_CHECKING:
    import tvm

    from tileauto.space import ProductSpace

# TVM is imported inside the factory: a process that loads the tuned kernel from the cache
# never calls it, and so never imports TVM's compiler (seconds of start-up).


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def _host_has_avx512() -> bool:
    """Whether this CPU has AVX-512 (32 zmm registers of 16 fp32 lanes).

    Read from ``/proc/cpuinfo`` (the kernel lists only what the OS enables) where there is
    one, so that importing this module does not import TVM; else LLVM's view of the CPU.
    """
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return "avx512f" in line.split()
    except OSError:
        pass
    try:
        import tvm

        with tvm.target.Target.from_device("cpu"):
            return bool(tvm.target.codegen.llvm_cpu_has_features(["avx512f"]))
    except Exception:  # not x86, or an LLVM without the query: assume 16 vector registers
        return False


# The default config depends on the register file: 8x32 fp32 (16 zmm accumulators) with
# AVX-512, else the classic 6x16 (12 ymm accumulators) that fits AVX2's 16 registers.
_AVX512 = _host_has_avx512()
_DEF_MICRO = (8, 32, 16) if _AVX512 else (6, 16, 8)  # micro_M, micro_N, vec
_DEF_BLOCK = (64, 128) if _AVX512 else (48, 128)  # block_M, block_N


def gemm(
    M: int,
    N: int,
    K: int,
    block_M: int = _DEF_BLOCK[0],
    block_N: int = _DEF_BLOCK[1],
    block_K: int = 256,
    micro_M: int = _DEF_MICRO[0],
    micro_N: int = _DEF_MICRO[1],
    vec: int = _DEF_MICRO[2],
    unroll: int = 4,
    parallel: bool = True,
    dtype: str = "float32",
) -> tvm.tirx.PrimFunc:
    """Return the PrimFunc ``main(A, B, C)`` computing ``C = A @ B``.

    Args:
        M, N, K: problem sizes (any positive ints).
        block_M, block_N: output tile of one parallel task (multiples of micro_M / micro_N).
        block_K: reduction slice kept in cache (a multiple of ``unroll``; clamped to K).
        micro_M, micro_N: register tile (micro_N a multiple of vec). Keep
            ``micro_M * micro_N / lanes`` accumulators under the register count: 16 ymm (AVX2)
            or 32 zmm (AVX-512), e.g. 6x16 or 4x24 with AVX2 and 8x32 with AVX-512.
        vec: vector width (lanes) of the innermost ``j`` loop.
        unroll: unroll factor of the innermost ``k`` loop.
        parallel: run the output tiles (and the packing of B) on the TVM thread pool.
        dtype: element type of A, B and C.
    """
    import tvm
    from tvm import s_tir, te

    sizes = {"M": M, "N": N, "K": K, "block_M": block_M, "block_N": block_N,
             "block_K": block_K, "micro_M": micro_M, "micro_N": micro_N, "vec": vec,
             "unroll": unroll}  # fmt: skip
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if block_M % micro_M or block_N % micro_N or micro_N % vec or block_K % unroll:
        raise ValueError(
            f"tiles must nest: block_M={block_M} % micro_M={micro_M}, block_N={block_N} % "
            f"micro_N={micro_N}, micro_N % vec={vec} and block_K={block_K} % unroll={unroll} "
            f"must all be 0"
        )
    # A reduction slice longer than K only adds zeros: clamp it.
    block_K = min(block_K, _ceildiv(K, unroll) * unroll)
    Mp, Np, Kp = (_ceildiv(M, block_M) * block_M, _ceildiv(N, block_N) * block_N,
                  _ceildiv(K, block_K) * block_K)  # fmt: skip

    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")

    def b_value(k, j):
        conds = ([k < K] if Kp != K else []) + ([j < N] if Np != N else [])
        if not conds:
            return B[k, j]
        inside = conds[0] if len(conds) == 1 else te.all(*conds)
        # The clamped index keeps the (never used) load in bounds.
        return te.if_then_else(
            inside, B[te.min(k, K - 1), te.min(j, N - 1)], tvm.tirx.const(0, dtype)
        )

    Bp = te.compute(
        (Np // block_N, Kp, block_N), lambda x, k, y: b_value(k, x * block_N + y), name="Bp"
    )
    # Padded rows of A are clamped to the last row: they only feed rows of C that are dropped.
    # Padded k reads a valid A element but multiplies it by a zero of Bp.
    a_row = (lambda i: te.min(i, M - 1)) if Mp != M else (lambda i: i)
    a_col = (lambda k: te.min(k, K - 1)) if Kp != K else (lambda k: k)
    k = te.reduce_axis((0, Kp), name="k")
    Cp = te.compute(
        (Mp, Np),
        lambda i, j: te.sum(A[a_row(i), a_col(k)] * Bp[j // block_N, k, j % block_N], axis=k),
        name="Cp",
    )
    C = te.compute((M, N), lambda i, j: Cp[i, j], name="C")

    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    # The accumulators: one block_M x block_N tile per task, in "local" (stack) memory.
    acc = sch.get_sblock("Cp")
    sch.set_scope(acc, 0, "local")
    i, j, kk = sch.get_loops(acc)
    io, im, ir = sch.split(i, [None, block_M // micro_M, micro_M])
    jo, jn, jr, jv = sch.split(j, [None, block_N // micro_N, micro_N // vec, vec])
    ko, ki, ku = sch.split(kk, [None, block_K // unroll, unroll])
    sch.reorder(io, jo, ko, im, jn, ki, ku, ir, jr, jv)
    sch.vectorize(jv)  # before decompose_reduction, or vectorize raises ScheduleError
    sch.unroll(jr)
    sch.unroll(ir)
    sch.unroll(ku)
    # Write the finished tile back to C once per task (predicated at the ragged edges).
    writeback = sch.get_sblock("C")
    sch.reverse_compute_at(writeback, jo)
    if Np == N and block_N % vec == 0:
        _, wv = sch.split(sch.get_loops(writeback)[-1], [None, vec])
        sch.vectorize(wv)
    tiles = sch.fuse(io, jo)
    if parallel:
        sch.parallel(tiles)
    sch.decompose_reduction(acc, ko)

    pack = sch.get_sblock("Bp")
    px, _, py = sch.get_loops(pack)
    if block_N % vec == 0:
        _, pv = sch.split(py, [None, vec])
        sch.vectorize(pv)
    if parallel:
        sch.parallel(px)
    return sch.mod["main"]


matmul = tileauto.jit(out_idx=[-1], target="llvm")(gemm)


def configs(M: int, N: int, K: int) -> list[dict]:
    """About 16 candidate configs: register tiles for AVX2 and AVX-512, a few cache tilings.

    Every entry nests (block % micro, micro_N % vec, block_K % unroll) and none is much larger
    than the problem, so each one compiles for any M, N, K.
    """
    micro = [  # (micro_M, micro_N, vec): accumulators = micro_M * micro_N / lanes
        (8, 32, 16),  # AVX-512: 16 zmm
        (4, 64, 16),  # AVX-512: 16 zmm
        (6, 32, 16),  # AVX-512: 12 zmm
        (12, 16, 16),  # AVX-512: 12 zmm
        (6, 16, 8),  # AVX2: 12 ymm
        (4, 24, 8),  # AVX2: 12 ymm
        (8, 8, 8),  # AVX2: 8 ymm
        (4, 16, 8),  # small tile: load-bound
    ]
    tilings = [(8, 4, 256), (4, 2, 512)]  # (block_M / micro_M, block_N / micro_N, block_K)
    out = []
    for mm, mn, vec in micro:
        for fm, fn, bk in tilings:
            # Shrink the cache tile for small problems so it is not mostly padding.
            fm = max(1, min(fm, _ceildiv(M, mm)))
            fn = max(1, min(fn, _ceildiv(N, mn)))
            cfg = {
                "block_M": mm * fm,
                "block_N": mn * fn,
                "block_K": bk,
                "micro_M": mm,
                "micro_N": mn,
                "vec": vec,
                "unroll": 4,
            }
            if cfg not in out:
                out.append(cfg)
    return out


get_configs = configs


def space(M: int, N: int, K: int, avx512: bool | None = None) -> ProductSpace:
    """A large constrained space for the search strategies: 2,412 configs at 384^3 with AVX-512.

    The product of cache tiles (``block_M``, ``block_N``, ``block_K``), register tiles
    (``micro_M``, ``micro_N``), vector width, ``k`` unroll and ``parallel``, kept where:

    * the tiles nest, as :func:`gemm` requires (``block % micro``, ``micro_N % vec``,
      ``block_K % unroll``);
    * the register tile keeps at least 4 independent accumulators (to hide the FMA latency) and
      fits the vector register file with its ``micro_N / vec`` B vectors and the A broadcast:
      32 zmm with AVX-512; on AVX2, 16 ymm of 8 lanes (a ``vec=16`` vector takes two);
    * no tile is larger than the problem (``block_K`` is clamped to K anyway);
    * a serial kernel (``parallel=False``) has large tiles: with small ones it only measures
      the overhead of a serial loop over many tiles.

    An AVX2-only host keeps 558 configs at 384^3 (half the registers: smaller register tiles).
    ``avx512`` says which register file to fit: this host's (None, the default), or another's,
    for a kernel compiled for another CPU (``target={"kind": "llvm", "mcpu": "haswell"}``:
    ``avx512=False``). ``bench/cpu_gemm_search.py`` tunes it exhaustively and with the default
    search.
    """
    from tileauto.space import product

    if avx512 is None:
        avx512 = _AVX512
    elif not isinstance(avx512, bool):
        raise TypeError(f"avx512 must be None (this host) or a bool, got {avx512!r}")
    lanes, regs = (16, 32) if avx512 else (8, 16)
    # a vector of `vec` lanes takes vec / lanes registers when it is wider than the hardware's
    width = "vec" if avx512 else str(lanes)
    return product(
        block_M=[16, 32, 64, 96, 128],
        block_N=[32, 64, 128, 192],
        block_K=[64, 128, 384],
        micro_M=[4, 6, 8, 12],
        micro_N=[16, 32, 48, 64],
        vec=[8, 16],
        unroll=[1, 2, 4],
        parallel=[True, False],
        constraints=[
            "block_M % micro_M == 0",
            "block_N % micro_N == 0",
            "micro_N % vec == 0",
            "block_K % unroll == 0",
            f"micro_M * micro_N / {width} >= 4",
            f"(micro_M + 1) * micro_N / {width} + 1 <= {regs}",
            f"block_M <= {max(M, 16)} and block_N <= {max(N, 32)} and block_K <= {max(K, 64)}",
            "parallel or block_M * block_N >= 96 * 128",
        ],
    )


def _short_label(cfg: dict) -> str:
    label = _common.config_label(cfg)
    return label.replace("block_", "b").replace("micro_", "u").replace("unroll", "unr")


def main(argv: list[str] | None = None) -> int:
    (M, N, K), show_all = _common.cpu_args(
        argv, __doc__, default=512, dims=("M", "N", "K"), flag="--mnk", flag_help="sizes"
    )
    torch.manual_seed(0)
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    flops = 2.0 * M * N * K
    return _common.cpu_check_and_time(
        matmul,
        (M, N, K),
        [a, b],
        torch.matmul,
        configs(M, N, K),
        show_all,
        header=f"gemm {M}x{N}x{K}: default config matches torch.matmul",
        baseline="torch.matmul",
        show_err=True,
        # fp32 sums of K products in another order: the error grows like sqrt(K).
        tol=dict(rtol=1e-3, atol=1e-4 * max(K, 1) ** 0.5),
        width=58,
        rate=lambda ms: f"{flops / ms / 1e6:7.1f} GFLOP/s",
        label=_short_label,
    )


if __name__ == "__main__":
    _common.use_all_cores()
    sys.exit(main())
