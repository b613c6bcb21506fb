import torch
from tvm import s_tir, te

import tileauto


@tileauto.autotune(max_trials=12, warmup=5, rep=20)  # 12 of the 32 configs
@tileauto.autotune.param("block_M", [16, 32, 64])
@tileauto.autotune.param("block_N", [16, 32, 64])
@tileauto.autotune.param("inner_N, unroll", [(4, True), (8, True), (8, False), (16, False)])
@tileauto.autotune.constraint("block_M * block_N <= 2048")
@tileauto.jit(out_idx=[-1])
def matmul(M, N, K, block_M=32, block_N=32, inner_N=8, unroll=False):
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    io, ii = sch.split(i, [None, block_M])
    jo, jm, jv = sch.split(j, [None, block_N // inner_N, inner_N])
    sch.reorder(io, jo, kk, ii, jm, jv)
    sch.parallel(sch.fuse(io, jo))
    sch.vectorize(jv)
    if unroll:
        sch.unroll(jm)
    return sch.mod["main"]


print(matmul.configs)  # ProductSpace(32 configs: block_M[3], block_N[3], inner_N, unroll[4])
print(matmul.configs.pruned)  # {'block_M * block_N <= 2048': 4}
kernel = matmul(128, 128, 128)
result = matmul.get_tuner_result(128, 128, 128)
print(result.extra["search"])  # {'strategy': 'auto(budget=None)', 'stop_reason': 'max_trials', ...}
A, B = torch.randn(128, 128), torch.randn(128, 128)
torch.testing.assert_close(kernel(A, B), A @ B, rtol=1e-4, atol=1e-4)
