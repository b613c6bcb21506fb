import torch
from tvm import s_tir, te

from tileauto import AutoTuner

M = N = K = 256


def kernel(block_M=32, block_N=32):
    """A factory of the tunable arguments only: the problem sizes come from the enclosing scope."""
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
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


def ref_program(A, B):
    return A @ B


if __name__ == "__main__":
    configs = [{"block_M": bm, "block_N": bn} for bm in (16, 64) for bn in (16, 64)]
    result = (
        AutoTuner.from_kernel(kernel=kernel, configs=configs)
        .set_compile_args(out_idx=[-1], target="auto")
        .set_profile_args(warmup=2, rep=5, ref_prog=ref_program, rtol=1e-3, atol=1e-3)
        .run()
    )
    print("best config:", result.config, f"{result.latency:.4f} ms")
    print(f"reference (torch) {result.ref_latency:.4f} ms")
    a, b = torch.randn(M, K), torch.randn(K, N)
    torch.testing.assert_close(result.kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
