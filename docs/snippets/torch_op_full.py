import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from tvm import te

import tileauto
from tileauto.jit.compiler import COMPILES


@tileauto.jit(out_idx=[-1])
def swiglu(M, N, dtype="float32"):
    G = te.placeholder((M, N), dtype, name="G")
    U = te.placeholder((M, N), dtype, name="U")
    Out = te.compute((M, N), lambda i, j: G[i, j] * U[i, j] / (1 + te.exp(-G[i, j])), name="O")
    return te.create_prim_func([G, U, Out])


def problem(gate, up):  # the op's arguments -> the factory's problem arguments
    return {"M": gate.shape[0], "N": gate.shape[1], "dtype": str(gate.dtype)[len("torch.") :]}


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward(ctx, grad):  # any torch ops (or other tileauto ops)
    gate, up = ctx.saved_tensors
    sig = torch.sigmoid(gate)
    return grad * up * sig * (1 + gate * (1 - sig)), grad * gate * sig


op = tileauto.torch_op(
    "mylib::swiglu", swiglu, problem=problem, backward=backward, setup_context=setup_context
)

# 1. The fake: output shapes and dtypes from the kernel's signature, nothing compiled.
with FakeTensorMode():
    out = op(torch.empty(8, 16), torch.empty(8, 16))
assert out.shape == (8, 16) and out.dtype == torch.float32 and COMPILES.count == 0

# 2. Autograd through the registered backward, checked in float64.
gate = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
up = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
assert torch.autograd.gradcheck(op, (gate, up))

# 3. Dynamic shapes: traced once, each size gets its own kernel at its first call.
f = torch.compile(lambda g, u: op(g, u).sum(dim=1), fullgraph=True, dynamic=True)
for m in (8, 16, 24):
    g, u = torch.randn(m, 32), torch.randn(m, 32)
    torch.testing.assert_close(f(g, u), (torch.nn.functional.silu(g) * u).sum(dim=1))


# 4. torch.export: the op is a node of the exported program, which runs it.
class Block(torch.nn.Module):
    def forward(self, gate, up):
        return op(gate, up) * 2


M = torch.export.Dim("M")
program = torch.export.export(Block(), (g, u), dynamic_shapes=({0: M}, {0: M}))
assert "mylib.swiglu" in str(program.graph)
g, u = torch.randn(40, 32), torch.randn(40, 32)
torch.testing.assert_close(program.module()(g, u), Block()(g, u))
