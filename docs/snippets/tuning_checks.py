import torch

import tileauto
import tileauto.language as T
from tileauto import AutoTuner


@tileauto.jit(out_idx=[-1])
def double(n, block=8):
    """B = 2 * A in tiles of `block`; a block that does not divide n forgets the tail (a bug)."""
    if block % 4:
        raise ValueError(f"block must be a multiple of 4, got {block}")

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i, j in T.grid(n // block, block):
            B[i * block + j] = A[i * block + j] * T.float32(2)

    return main


n = 1000
configs = [{"block": 8}, {"block": 40}, {"block": 64}, {"block": 6}]


def reference(A):  # takes the inputs, returns the expected output(s)
    return A * 2


result = (
    AutoTuner.from_kernel(double(n), configs)
    .set_profile_args(warmup=2, rep=5, ref_prog=reference, rtol=1e-5, atol=1e-5)
    .run()
)
for t in result.trials:
    print(t.index, t.config, t.status.value, t.reason)
# 0 {'block': 8} ok ok
# 1 {'block': 40} ok ok
# 2 {'block': 64} mismatch mismatch: unwritten output: 40 elements of B (of 1000; ...
# 3 {'block': 6} compile_error compile_error: ValueError: block must be a multiple of 4, got 6


def check(A, B):  # takes the inputs and the outputs: a checker returning a bool (or raising)
    return bool(torch.equal(B, A * 2))


r2 = AutoTuner.from_kernel(double(n), configs).set_profile_args(warmup=2, rep=5, ref_prog=check)
assert r2.run(verbose=False).config == result.config


def manual(results, expected):  # results: outputs; expected: the default config's outputs here
    torch.testing.assert_close(results[0], expected[0])  # raise (or return False) on mismatch


r3 = AutoTuner.from_kernel(double(n), configs).set_profile_args(
    warmup=2, rep=5, manual_check_prog=manual
)
print(r3.run(verbose=False).table())
