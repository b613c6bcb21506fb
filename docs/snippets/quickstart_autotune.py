import torch
from tvm import s_tir, te

import tileauto


@tileauto.autotune(
    configs=[
        {"block_M": 16, "block_N": 16},
        {"block_M": 32, "block_N": 64},
        {"block_M": 64, "block_N": 32},
    ],
    warmup=2,
    rep=5,
)
@tileauto.jit(out_idx=[-1])
def matmul(M, N, K, block_M=32, block_N=32, dtype="float32"):
    """C = A @ B, computed in block_M x block_N tiles (one parallel task per row of tiles)."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    block = sch.get_sblock("C")
    i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, [None, block_M])
    jo, ji = sch.split(j, [None, block_N])
    sch.reorder(io, jo, kk, ii, ji)
    sch.vectorize(ji)
    sch.parallel(io)
    sch.decompose_reduction(block, kk)
    return sch.mod["main"]


if __name__ == "__main__":
    M = N = K = 256
    kernel = matmul(M, N, K)  # tunes: compiles every config, checks, times, prints the table
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = kernel(a, b)  # inputs in; the output (parameter -1) is allocated and returned
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    print("best config:", kernel.config)

    assert matmul(M, N, K) is kernel  # same arguments, same process: no tuning, same kernel
    result = matmul.get_tuner_result(M, N, K)
    print(f"best {result.latency:.4f} ms; default config {result.default_latency:.4f} ms")
