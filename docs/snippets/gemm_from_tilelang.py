# tileauto (TE + a TVM schedule; runs on the CPU)
import torch
from tvm import s_tir, te

import tileauto


@tileauto.autotune(configs=[{"block_M": 32, "block_N": 64}, {"block_M": 64, "block_N": 64}])
@tileauto.jit(out_idx=[-1])
def matmul(M, N, K, block_M=64, block_N=64):
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    io, ii = sch.split(i, [None, block_M])
    jo, ji = sch.split(j, [None, block_N])
    sch.reorder(io, jo, kk, ii, ji)
    sch.parallel(sch.fuse(io, jo))
    return sch.mod["main"]


kernel = matmul(256, 256, 256)  # tunes once (or loads the cached winner)
A, B = torch.randn(256, 256), torch.randn(256, 256)
torch.testing.assert_close(kernel(A, B), A @ B, rtol=1e-4, atol=1e-4)
