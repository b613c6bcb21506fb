import torch
from tvm import s_tir, te

import tileauto
import tileauto.language as T


def space(n):
    """Called with the kernel's arguments: tile sizes that fit the problem."""
    return [{"block": b} for b in T.powers_of_2(32, min(256, n))]


@tileauto.autotune(configs=space, warmup=2, rep=5, key=lambda n: T.next_power_of_2(n))
@tileauto.jit(out_idx=[-1])
def double(n, block=64):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    _, inner = sch.split(i, [None, block])
    sch.vectorize(inner)
    return sch.mod["main"]


k1000 = double(1000)  # tunes the bucket next_power_of_2(1000) == 1024
k1024 = double(1024)  # same bucket: the tuned config is reused, only a compile for n=1024
assert k1024.config["block"] == k1000.config["block"]
assert double.get_tuner_result(1000) is double.get_tuner_result(1024)
x = torch.randn(1000)
torch.testing.assert_close(k1000(x), x * 2)
