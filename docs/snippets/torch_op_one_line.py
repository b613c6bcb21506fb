import torch
from tvm import s_tir, te

import tileauto


@tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], warmup=2, rep=5)
@tileauto.jit(out_idx=[-1])
def swiglu(M, N, vec=4):  # vec is tuned: it never reaches the op's schema
    G = te.placeholder((M, N), "float32", name="G")
    U = te.placeholder((M, N), "float32", name="U")
    Out = te.compute((M, N), lambda i, j: G[i, j] * U[i, j] / (1 + te.exp(-G[i, j])), name="O")
    sch = s_tir.Schedule(te.create_prim_func([G, U, Out]))
    _, j = sch.get_loops(sch.get_sblock("O"))
    sch.vectorize(sch.split(j, [None, vec])[1])
    return sch.mod["main"]


op = tileauto.torch_op("mylib::swiglu", swiglu, problem=lambda gate, up: gate.shape)
print(torch.ops.mylib.swiglu.default._schema)  # mylib::swiglu(Tensor gate, Tensor up) -> Tensor


@torch.compile(fullgraph=True)  # Inductor; the op is one node of the graph
def mlp(x, w_gate, w_up):
    return op(x @ w_gate, x @ w_up) + x @ w_up


x, w_gate, w_up = torch.randn(64, 32), torch.randn(32, 128), torch.randn(32, 128)
expected = torch.nn.functional.silu(x @ w_gate) * (x @ w_up) + x @ w_up
torch.testing.assert_close(mlp(x, w_gate, w_up), expected, rtol=1e-4, atol=1e-4)
