import torch
from tvm import te

import tileauto


@tileauto.jit(out_idx=[2])
def pair():
    n, m = te.var("n"), te.var("n")  # two variables, one name
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((m,), "float32", name="B")
    c = te.compute((m * 2,), lambda i: b[i // 2] + a[0], name="C")
    return te.create_prim_func([a, b, c])


kernel = pair()
print([p.shape for p in kernel.params])  # [('n',), ('n_1',), ('n_1 * 2',)]
c = kernel(torch.randn(5), torch.randn(7))  # n = 5, n_1 = 7
assert c.shape == (14,)
