import torch
from tvm import s_tir, te

import tileauto
from tileauto import AutoTuner, TensorSupplyType


@tileauto.jit(out_idx=[-1])
def normalize(n, block=64):
    """B = A / S[0], for inputs where S must never be zero."""
    A = te.placeholder((n,), "float32", name="A")
    S = te.placeholder((1,), "float32", name="S")
    B = te.compute((n,), lambda i: A[i] / S[0], name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, S, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    _, inner = sch.split(i, [None, block])
    sch.vectorize(inner)
    return sch.mod["main"]


n = 2048
configs = [{"block": 16}, {"block": 128}]

# 1. Concrete tensors: every kernel tuned inside the block uses (copies of) them.
a, s = torch.randn(n), torch.tensor([4.0])
with tileauto.set_autotune_inputs(a, s):
    r1 = AutoTuner.from_kernel(normalize(n), configs).set_profile_args(warmup=2, rep=5).run()
assert torch.equal(s, torch.tensor([4.0]))  # tuning never modifies the tensors you pass


# 2. A supply program: gets the inputs' records (name, torch dtype, shape).
def supply(params):
    print([(p.name, p.shape, p.dtype) for p in params])  # [('A', (2048,), torch.float32), ...]
    return [torch.randn(n), torch.full((1,), 2.0)]  # the inputs, in order


r2 = (
    AutoTuner.from_kernel(normalize(n), configs)
    .set_profile_args(warmup=2, rep=5, supply_prog=supply)
    .run(verbose=False)
)

# 3. A generator (static shapes only): One keeps S away from zero here.
r3 = (
    AutoTuner.from_kernel(normalize(n), configs)
    .set_profile_args(warmup=2, rep=5, supply_type=TensorSupplyType.One)
    .run(verbose=False)
)
print(r1.config, r2.config, r3.config)
