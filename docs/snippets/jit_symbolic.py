import torch

import tileauto
import tileauto.language as T


@tileauto.jit(out_idx=[-1])
def repeat2(dtype="float32"):
    """B = [A, A] for any length n of A: n is a size variable, bound by the input at call time."""

    @T.prim_func
    def main(a: T.handle, b: T.handle):
        n = T.int32()
        A = T.match_buffer(a, (n,), dtype)
        B = T.match_buffer(b, (n * 2,), dtype)
        for i in range(n):
            B[i] = A[i]
            B[i + n] = A[i]

    return main


kernel = repeat2()
print(kernel)  # JITKernel(main(A: ['n'] float32, B: ['n * 2'] float32), out_idx=[1], ...)
for n in (5, 1000):
    x = torch.randn(n)
    y = kernel(x)  # the output's shape, n * 2, comes from the input's
    torch.testing.assert_close(y, torch.cat([x, x]))
