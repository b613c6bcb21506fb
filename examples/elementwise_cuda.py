"""Fused elementwise kernel for CUDA GPUs: the SwiGLU gate ``out = silu(gate) * up``.

``silu(g) = g / (1 + exp(-g))`` over (M, N) tensors, one pass reading two tensors and writing
one. Built with TE and scheduled with ``tvm.s_tir.Schedule``: the index space is fused into a
flat loop and split into thread blocks of ``threads`` threads; each thread handles ``unroll``
vectors of ``vec`` consecutive elements (a float4 for ``vec = 4``), with the threads of a block
on consecutive vectors so that every step is a coalesced access. Any M and N work: the
partial last block is predicated per vector, and when ``vec`` does not divide ``M * N`` the
lanes are predicated too (and the access is no longer vectorized).

Without a GPU, ``python examples/elementwise_cuda.py`` compiles every config of ``configs()``
for ``sm_90``, checks the PTX with nvcc when it is installed and prints the size of the CUDA
source; with one, it also runs them and checks against torch.
"""

from __future__ import annotations

import sys

import _cuda_common
import torch
import tvm
from _common import check_shape

# "X as X": re-exported, for callers and the tests (e.g. gemm_cuda.ptx_of)
from _cuda_common import COMPILE_TARGET as COMPILE_TARGET
from _cuda_common import GPU_LIMITS
from _cuda_common import compile_cuda_source as compile_cuda_source
from _cuda_common import lowered_gpu_ok as lowered_gpu_ok
from _cuda_common import ptx_of as ptx_of
from tvm import s_tir, te

import tileauto


def silu_mul(
    M: int,
    N: int,
    threads: int = 256,
    vec: int = 4,
    unroll: int = 2,
    dtype: str = "float32",
) -> tvm.tirx.PrimFunc:
    """Return the PrimFunc ``main(G, U, O)`` computing ``O = silu(G) * U`` on a CUDA device.

    Args:
        M, N: tensor shape (any positive ints).
        threads: threads per block (at most 1024).
        vec: consecutive elements per thread and step (vector width; at most 16 bytes).
        unroll: steps per thread (a block covers ``threads * vec * unroll`` elements).
        dtype: element type.
    """
    check_shape(M, N)
    itemsize = tvm.runtime.DataType(dtype).bits // 8
    if not 1 <= threads <= GPU_LIMITS["max_threads_per_block"]:
        raise ValueError(f"threads={threads} must be in [1, {GPU_LIMITS['max_threads_per_block']}]")
    if vec < 1 or vec * itemsize > GPU_LIMITS["max_vector_bytes"] or unroll < 1:
        raise ValueError(f"vec={vec} must be 1..{GPU_LIMITS['max_vector_bytes'] // itemsize}, "
                         f"unroll={unroll} positive")  # fmt: skip
    G = te.placeholder((M, N), dtype, name="G")
    U = te.placeholder((M, N), dtype, name="U")
    one = tvm.tirx.const(1, dtype)
    Out = te.compute((M, N), lambda i, j: G[i, j] * U[i, j] / (one + te.exp(-G[i, j])), name="O")

    sch = s_tir.Schedule(te.create_prim_func([G, U, Out]))
    out = sch.get_sblock("O")
    flat = sch.fuse(*sch.get_loops(out))
    n = M * N
    # Split off the lanes first: when vec divides n, the bounds predicate of the last block
    # does not depend on the lane, so the lanes still become one vector access.
    vectors, lanes = sch.split(flat, [None, vec])
    bx, step, tx = sch.split(vectors, [None, unroll, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.unroll(step)
    if n % vec == 0:
        sch.vectorize(lanes)
    else:
        sch.unroll(lanes)
    return sch.mod["main"]


swiglu = tileauto.jit(out_idx=[-1], target="cuda")(silu_mul)


def configs(M: int, N: int) -> list[dict]:
    """16 candidates: threads per block, vector width and steps per thread."""
    out = []
    for threads in (128, 256, 512, 1024):
        for vec, unroll in ((4, 1), (4, 2), (2, 4), (1, 4)):
            out.append({"threads": threads, "vec": vec, "unroll": unroll})
    return out


get_configs = configs


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


def main(argv: list[str] | None = None) -> int:
    args = _cuda_common.cuda_args(
        argv, __doc__, "--shape", nargs=2, default=(8192, 8192), metavar=("M", "N")
    )
    M, N = args.shape
    candidates = configs(M, N)
    title = f"silu(gate) * up, {M}x{N}"
    if not _cuda_common.compile_every_config(silu_mul, (M, N), candidates, title, args.no_nvcc):
        return 0
    torch.manual_seed(0)
    gate = torch.randn(M, N, device="cuda") * 4
    up = torch.randn(M, N, device="cuda")
    gbytes = 3 * M * N * gate.element_size() / 1e9
    return _cuda_common.gpu_check_and_time(
        swiglu,
        (M, N),
        [gate, up],
        reference,
        candidates,
        baseline="torch silu(g) * u",
        tol=dict(rtol=1e-5, atol=1e-5),
        width=36,
        rate=lambda ms: f"{gbytes / ms * 1e3:7.1f} GB/s",
    )


if __name__ == "__main__":
    sys.exit(main())
