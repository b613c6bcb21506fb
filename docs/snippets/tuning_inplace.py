import torch

import tileauto
import tileauto.language as T


@tileauto.autotune(configs=[{"block": 16}, {"block": 128}], warmup=2, rep=5)
@tileauto.jit  # no out_idx: every parameter is an input, and the kernel writes into X
def scale_(n, block=64):
    @T.prim_func
    def main(X: T.Buffer((n,), "float32")):
        for i, j in T.grid(n // block, block):
            X[i * block + j] = X[i * block + j] * T.float32(3)

    return main


n = 4096
x = torch.ones(n)
with tileauto.set_autotune_inputs(x):
    kernel = scale_(n)
assert torch.equal(x, torch.ones(n))  # tuning ran every config on its own copies of x

result = scale_.get_tuner_result(n)
print(result.trials[0].notes)  # ("writes into input 'X'",)

assert kernel(x) is None  # no outputs: the call returns None ...
assert torch.equal(x, torch.full((n,), 3.0))  # ... and the kernel updated x in place
