"""``tileauto.torch_op``: tuned kernels as PyTorch custom ops, with real compiles and Inductor.

Every kernel here is compiled by TVM for this CPU; every graph is compiled by Inductor (its
C++ backend) unless a test only needs dynamo's view of it. Op names are unique per test, as a
process cannot register one name twice.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from tvm import te

import tileauto
import tileauto.language as T
from tileauto.errors import KernelArgumentError
from tileauto.jit.compiler import COMPILES
from tileauto.ops import TorchOp, TorchOpError

_names = itertools.count()


def _name(stem: str) -> str:
    return f"tileauto_test::{stem}_{next(_names)}"


def _silu_mul(M, N, dtype="float32", vec=4):
    """O = silu(G) * U for (M, N) tensors (``vec``: a tunable that must never reach the op)."""
    G = te.placeholder((M, N), dtype, name="G")
    U = te.placeholder((M, N), dtype, name="U")
    one = te.const(1, dtype)
    Out = te.compute((M, N), lambda i, j: G[i, j] * U[i, j] / (one + te.exp(-G[i, j])), name="O")
    return te.create_prim_func([G, U, Out])


swiglu = tileauto.jit(out_idx=[-1], target="llvm")(_silu_mul)


def _reference(gate, up):
    return F.silu(gate) * up


@tileauto.jit(out_idx=[-1], target="llvm")
def _repeat2(dtype="float32"):
    """B = [A, A] for any length n: one kernel for every size (a size variable)."""

    @T.prim_func
    def main(a: T.handle, b: T.handle):
        n = T.int32()
        A = T.match_buffer(a, (n,), dtype)
        B = T.match_buffer(b, (n * 2,), dtype)
        for i in range(n):
            B[i] = A[i]
            B[i + n] = A[i]

    return main


@tileauto.jit(target="llvm")
def _scale_(n, factor=3.0):
    """X *= factor, in place: no outputs."""

    @T.prim_func
    def main(X: T.Buffer((n,), "float32")):
        for i in range(n):
            X[i] = X[i] * T.float32(factor)

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def _copy_and_zero(n):
    """Y = X, and X zeroed: a kernel that writes an input besides its output."""

    @T.prim_func
    def main(X: T.Buffer((n,), "float32"), Y: T.Buffer((n,), "float32")):
        for i in range(n):
            Y[i] = X[i]
            X[i] = T.float32(0)

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def _padded(n, pad=0):
    """B = A followed by ``pad`` zeros: a config that changes the output's shape."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n + pad,), "float32")):
        for i in range(n + pad):
            B[i] = T.if_then_else(i < n, A[T.min(i, n - 1)], T.float32(0))

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def _concat_static(n):
    """B = [A, A] with static shapes: B's extent, 2 * n, is none of the op's sizes."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((2 * n,), "float32")):
        for i in range(n):
            B[i] = A[i]
            B[i + n] = A[i]

    return main


@tileauto.jit(out_idx=[-1], target="llvm")
def _head3(n):
    """B = 2 * A[:3]: an output of constant length whatever n is (n >= 3)."""

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((3,), "float32")):
        for i in range(3):
            B[i] = A[i] * T.float32(2)

    return main


def _inputs(m=8, n=16, dtype=torch.float32):
    torch.manual_seed(m * 1000 + n)
    return torch.randn(m, n, dtype=dtype), torch.randn(m, n, dtype=dtype)


# -- the op, called as a function ----------------------------------------------------------------


def test_schema_holds_the_ops_arguments_and_never_the_tunables():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    assert isinstance(op, TorchOp)
    schema = str(op.default._schema)
    assert schema.endswith("(Tensor gate, Tensor up) -> Tensor"), schema
    assert "vec" not in schema and "dtype" not in schema
    ns, name = op.name.split("::")
    assert getattr(getattr(torch.ops, ns), name).default is op.default


def test_call_matches_the_factory_and_compiles_once_per_problem():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    gate, up = _inputs(8, 16)
    torch.testing.assert_close(op(gate, up), swiglu(8, 16)(gate, up), rtol=0, atol=0)
    before = COMPILES.count
    for _ in range(3):
        torch.testing.assert_close(op(gate, up), _reference(gate, up), rtol=1e-5, atol=1e-5)
    assert COMPILES.count == before  # the kernel came from memory each time
    assert list(op.kernels()) == [(torch.Size([8, 16]), torch.device("cpu"))]


def test_two_ops_of_one_factory_share_its_kernels():
    first = tileauto.torch_op(_name("a"), swiglu, problem=lambda gate, up: gate.shape)
    second = tileauto.torch_op(_name("b"), swiglu, problem=lambda g, u: g.shape)
    gate, up = _inputs(5, 7)
    before = COMPILES.count
    torch.testing.assert_close(first(gate, up), _reference(gate, up), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(second(gate, up), _reference(gate, up), rtol=1e-5, atol=1e-5)
    assert COMPILES.count - before == 1  # one compile: both asked the factory for (5, 7)
    assert str(second.default._schema).endswith("(Tensor g, Tensor u) -> Tensor")
    (k1,) = first.kernels().values()
    (k2,) = second.kernels().values()
    assert k1 is k2


def test_a_problem_of_lists_is_remembered_by_its_description():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda g, u: [g.shape[0], g.shape[1]])
    gate, up = _inputs(6, 10)
    before = COMPILES.count
    for _ in range(3):
        torch.testing.assert_close(op(gate, up), _reference(gate, up), rtol=1e-5, atol=1e-5)
    assert COMPILES.count - before == 1
    assert len(op.kernels()) == 1


def test_no_grad_and_inference_mode():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    gate, up = _inputs(4, 8)
    with torch.no_grad():
        out = op(gate, up)
    torch.testing.assert_close(out, _reference(gate, up), rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        g, u = _inputs(4, 8)
        out = op(g, u)
        assert out.is_inference()
    torch.testing.assert_close(out, _reference(gate, up), rtol=1e-5, atol=1e-5)


def test_user_scalars_are_op_arguments():
    def problem(x: torch.Tensor, factor: float = 3.0):
        return {"n": x.shape[0], "factor": factor}

    op = tileauto.torch_op(_name("scale"), _scale_, problem=problem, mutates_args=["x"])
    assert str(op.default._schema).endswith("(Tensor(a!) x, float factor=3.) -> ()")
    x = torch.ones(6)
    assert op(x) is None
    assert torch.equal(x, torch.full((6,), 3.0))
    op(x, 0.5)  # another factor is another problem: its own kernel
    assert torch.equal(x, torch.full((6,), 1.5))
    assert len(op.kernels()) == 2


# -- torch.compile ------------------------------------------------------------------------------


def test_fullgraph_compile_has_no_graph_break_and_matches_eager():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)

    def f(gate, up):
        return op(gate, up) * 2 + up

    gate, up = _inputs(8, 16)
    explained = torch._dynamo.explain(f)(gate, up)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    targets = [n.target for g in explained.graphs for n in g.graph.nodes]
    assert any(getattr(t, "_name", "") == op.name for t in targets), targets

    compiled = torch.compile(f, fullgraph=True, backend="inductor")
    for m in (8, 8, 3):  # new inputs each call; a new shape recompiles the graph
        gate, up = _inputs(m, 16)
        torch.testing.assert_close(compiled(gate, up), f(gate, up), rtol=1e-5, atol=1e-5)


def test_dynamic_shapes_trace_once_and_tune_each_size():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(gate, up):
        return op(gate, up) + 1

    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend=count)
    before = COMPILES.count
    for m, n in ((11, 19), (15, 19), (23, 27)):  # sizes no other test compiles
        gate, up = _inputs(m, n)
        torch.testing.assert_close(
            compiled(gate, up), _reference(gate, up) + 1, rtol=1e-5, atol=1e-5
        )
    assert len(graphs) == 1  # one trace, symbolic sizes
    assert COMPILES.count - before == 3  # each concrete size its own kernel
    assert sorted(tuple(k[0]) for k in op.kernels()) == [(11, 19), (15, 19), (23, 27)]


def test_a_key_bucket_is_tuned_once_for_every_size_in_it():
    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}], key=["N"], warmup=1, rep=2, verbose=False
    )(swiglu)
    op = tileauto.torch_op(_name("swiglu"), tuned, problem=lambda gate, up: gate.shape)
    compiled = torch.compile(lambda g, u: op(g, u) * 3, fullgraph=True, dynamic=True)
    for m in (9, 17, 33):
        gate, up = _inputs(m, 12)
        torch.testing.assert_close(
            compiled(gate, up), _reference(gate, up) * 3, rtol=1e-5, atol=1e-5
        )
    results = {id(tuned.get_tuner_result(m, 12)) for m in (9, 17, 33)}
    assert len(results) == 1  # one tuning: the bucket N=12
    kernels = op.kernels()
    assert len(kernels) == 3  # each size its own kernel, of the bucket's config
    assert len({k.config["vec"] for k in kernels.values()}) == 1


def test_dynamic_shapes_with_inductor_and_mark_dynamic():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)

    def f(gate, up):
        return op(gate, up).sum(dim=1)

    compiled = torch.compile(f, fullgraph=True)
    for m in (6, 10, 14):
        gate, up = _inputs(m, 16)
        torch._dynamo.mark_dynamic(gate, 0)
        torch._dynamo.mark_dynamic(up, 0)
        torch.testing.assert_close(
            compiled(gate, up), _reference(gate, up).sum(dim=1), rtol=1e-4, atol=1e-4
        )


def test_a_symbolic_kernel_keeps_its_output_expression():
    op = tileauto.torch_op(_name("repeat2"), _repeat2, problem=lambda a: ())
    sizes = []

    def record(gm, example_inputs):
        (node,) = [n for n in gm.graph.nodes if getattr(n.target, "_name", "") == op.name]
        (arg,) = node.args
        sizes.append((arg.meta["example_value"].shape[0], node.meta["example_value"].shape[0]))
        return gm.forward

    traced = torch.compile(lambda a: op(a), fullgraph=True, dynamic=True, backend=record)
    traced(torch.randn(6))
    ((n, out),) = sizes
    assert isinstance(n, torch.SymInt) and isinstance(out, torch.SymInt)
    assert str(out) == str(2 * n)  # the signature's n * 2, in the input's own symbol
    compiled = torch.compile(lambda a: op(a) - 1, fullgraph=True, dynamic=True)
    for n in (5, 9, 33):
        a = torch.randn(n)
        torch.testing.assert_close(compiled(a), torch.cat([a, a]) - 1)


# -- fakes ---------------------------------------------------------------------------------------


def test_fake_never_compiles_nor_tunes():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    before = COMPILES.count
    with FakeTensorMode():
        gate, up = torch.empty(32, 64), torch.empty(32, 64)
        out = op(gate, up)
    assert (tuple(out.shape), out.dtype) == ((32, 64), torch.float32)
    exported = torch.export.export(_Module(op), _inputs(32, 64))  # traced with fakes too
    assert COMPILES.count == before
    assert op.kernels() == {}
    del exported


def test_fake_reads_a_kernel_in_memory_without_elaborating(monkeypatch):
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    gate, up = _inputs(3, 5)
    op(gate, up)

    import tileauto.ops._fake as fake_module

    def refuse(*args, **kwargs):
        raise AssertionError("elaborated although the kernel was in memory")

    monkeypatch.setattr(fake_module, "elaborated_signature", refuse)
    with FakeTensorMode():
        out = op(torch.empty(3, 5), torch.empty(3, 5))
    assert tuple(out.shape) == (3, 5)


def test_out_shapes_replaces_the_inference_and_is_checked():
    good = tileauto.torch_op(
        _name("swiglu"),
        swiglu,
        problem=lambda gate, up: gate.shape,
        out_shapes=lambda g, u: g.shape,
    )
    gate, up = _inputs(4, 4)
    compiled = torch.compile(lambda g, u: good(g, u) + 0, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(gate, up), _reference(gate, up), rtol=1e-5, atol=1e-5)

    wrong = tileauto.torch_op(
        _name("swiglu"),
        swiglu,
        problem=lambda gate, up: gate.shape,
        out_shapes=lambda g, u: [(g.shape[0], g.shape[1] + 1)],
    )
    compiled = torch.compile(lambda g, u: wrong(g, u) + 0, fullgraph=True, backend="aot_eager")
    with pytest.raises(TorchOpError, match="where the op's fake says"):
        compiled(*_inputs(4, 4))


def test_a_config_that_pads_its_output_is_caught_after_a_trace():
    only_padded = {"early_config_prune": lambda configs, named_args, **kw: configs[1:]}
    tuned = tileauto.autotune(
        configs=[{"pad": 0}, {"pad": 1}], prune_configs_by=only_padded, verbose=False
    )(_padded)
    op = tileauto.torch_op(_name("padded"), tuned, problem=lambda a: a.shape[0])
    compiled = torch.compile(lambda a: op(a) + 1, fullgraph=True, backend="aot_eager")
    with pytest.raises(
        TorchOpError,
        match=r"\[\(\(7,\), 'float32'\)\] where the op's fake says \[\(\(6,\), 'float32'\)\]",
    ):
        compiled(torch.randn(6))


def test_a_padding_config_is_caught_under_dynamic_shapes():
    only_padded = {"early_config_prune": lambda configs, named_args, **kw: configs[1:]}

    def padded_op():
        tuned = tileauto.autotune(
            configs=[{"pad": 0}, {"pad": 2}], prune_configs_by=only_padded, verbose=False
        )(_padded)
        return tileauto.torch_op(_name("padded"), tuned, problem=lambda a: a.shape[0])

    op = padded_op()  # traced first: the first real call of each size is checked
    compiled = torch.compile(lambda a: op(a) + 1, fullgraph=True, dynamic=True, backend="eager")
    with pytest.raises(
        TorchOpError, match=r"\[\(\(11,\), 'float32'\)\] where the op's fake says \[\(\(9,"
    ):
        compiled(torch.randn(9))

    op = padded_op()  # called first: the trace compares the kernel in memory
    assert tuple(op(torch.randn(10)).shape) == (12,)  # eager: the kernel's own output
    compiled = torch.compile(lambda a: op(a) + 1, fullgraph=True, dynamic=True, backend="eager")
    with pytest.raises(Exception, match=r"outputs \[\(\(12,\), 'float32'\)\] where the default"):
        compiled(torch.randn(10))


def test_a_static_extent_the_fake_cannot_write_is_refused_under_dynamic_shapes():
    op = tileauto.torch_op(_name("concat"), _concat_static, problem=lambda a: a.shape[0])
    x = torch.randn(5)
    torch.testing.assert_close(op(x), torch.cat([x, x]))  # eager: fine
    static = torch.compile(lambda a: op(a) + 1, fullgraph=True, backend="eager")
    torch.testing.assert_close(static(x), torch.cat([x, x]) + 1)  # static shapes: fine
    dynamic = torch.compile(lambda a: op(a) + 1, fullgraph=True, dynamic=True, backend="eager")
    with pytest.raises(Exception, match=r"dim 0 is 14 at these sizes and 28 at twice.*out_shapes"):
        dynamic(torch.randn(7))
    writable = tileauto.torch_op(
        _name("concat"),
        _concat_static,
        problem=lambda a: a.shape[0],
        out_shapes=lambda a: [(2 * a.shape[0],)],
    )
    dynamic = torch.compile(lambda a: writable(a) + 1, fullgraph=True, dynamic=True)
    for n in (7, 8, 13):
        a = torch.randn(n)
        torch.testing.assert_close(dynamic(a), torch.cat([a, a]) + 1)


@tileauto.jit(out_idx=[-1])
def _transpose(M, N):
    A = te.placeholder((M, N), "float32", name="A")
    return te.create_prim_func([A, te.compute((N, M), lambda i, j: A[j, i], name="B")])


class _Widths(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, a):
        out = self.op(a)
        return out, torch.zeros(out.shape[0])  # as many as a has columns


@pytest.mark.parametrize("example", [(8, 8), (6, 8)], ids=["square", "oblong"])
def test_an_extent_of_several_equal_example_sizes_follows_its_own_under_export(example):
    # a square example under export's separate symbols: the fake wrote (N, M) as (M, M), and
    # the exported program gave zeros of the wrong length without an error. Each symbol is
    # doubled alone to tell which one an extent follows.
    op = tileauto.torch_op(_name("transpose"), _transpose, problem=lambda a: tuple(a.shape))
    M, N = torch.export.Dim("M"), torch.export.Dim("N")
    program = torch.export.export(
        _Widths(op), (torch.randn(*example),), dynamic_shapes=({0: M, 1: N},)
    )
    a = torch.randn(3, 5)
    out, zeros = program.module()(a)
    torch.testing.assert_close(out, a.T.contiguous())
    assert zeros.shape == (5,)


def test_a_constant_extent_stays_a_constant_under_dynamic_shapes():
    op = tileauto.torch_op(_name("head"), _head3, problem=lambda a: a.shape[0])
    shapes = []

    def record(gm, example_inputs):
        (node,) = [n for n in gm.graph.nodes if getattr(n.target, "_name", "") == op.name]
        shapes.append(node.meta["example_value"].shape)
        return gm.forward

    compiled = torch.compile(lambda a: op(a), fullgraph=True, dynamic=True, backend=record)
    for n in (3, 5, 9):  # 3: an input as long as the constant output, at the trace
        a = torch.randn(n)
        torch.testing.assert_close(compiled(a), a[:3] * 2)
    assert [tuple(s) for s in shapes] == [(3,)]  # one trace; the output is 3 long, always


# -- autograd ------------------------------------------------------------------------------------


def _swiglu_grads(gate, up, grad):
    sig = torch.sigmoid(gate)
    return grad * up * sig * (1 + gate * (1 - sig)), grad * gate * sig


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    gate, up = ctx.saved_tensors
    return _swiglu_grads(gate, up, grad)


def _problem64(gate, up):
    return {"M": gate.shape[0], "N": gate.shape[1], "dtype": str(gate.dtype).removeprefix("torch.")}


def test_gradcheck_through_a_registered_backward():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=_problem64)
    op.register_autograd(_backward, setup_context=_setup)
    gate = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    up = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (gate, up))
    out = op(gate, up)
    assert out.requires_grad


def test_backward_convenience_and_compiled_backward():
    op = tileauto.torch_op(
        _name("swiglu"), swiglu, problem=_problem64, backward=_backward, setup_context=_setup
    )
    gate = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    up = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (gate, up))

    compiled = torch.compile(lambda g, u: op(g, u).sum(), fullgraph=True)
    compiled(gate, up).backward()
    want_g, want_u = _swiglu_grads(
        gate.detach(), up.detach(), torch.ones(4, 6, dtype=torch.float64)
    )
    torch.testing.assert_close(gate.grad, want_g)
    torch.testing.assert_close(up.grad, want_u)


def test_without_a_backward_the_op_says_so():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    gate = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(TorchOpError, match="no autograd formula: register one"):
        op(gate, torch.randn(2, 3)).sum().backward()


def test_a_compiled_forward_without_a_backward_says_to_use_no_grad():
    # torch.compile traces the backward with a forward whose inputs require grad: the forward
    # alone failed with torch's "no autograd formula", which did not say what to do
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    linear = torch.nn.Linear(8, 8)  # its parameters require grad, as a model's do

    def f(x):
        h = linear(x)
        return op(h, h) * 2

    x = torch.randn(4, 8)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"torch.no_grad\(\) or torch.inference_mode\(\)"):
        compiled(x)
    with torch.no_grad():
        h = linear(x)
        torch.testing.assert_close(compiled(x), _reference(h, h) * 2, rtol=1e-5, atol=1e-5)


# -- torch.export --------------------------------------------------------------------------------


class _Module(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, gate, up):
        return self.op(gate, up) * 0.5


def test_export_round_trip():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    module = _Module(op)
    M = torch.export.Dim("M", min=2, max=64)
    program = torch.export.export(module, _inputs(8, 16), dynamic_shapes=({0: M}, {0: M}))
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert op.default in targets, targets
    assert op.name.replace("::", ".") in str(program.graph)
    for m in (8, 5):
        gate, up = _inputs(m, 16)
        torch.testing.assert_close(program.module()(gate, up), module(gate, up), rtol=0, atol=0)


# -- mutation ------------------------------------------------------------------------------------


def test_declared_mutation_under_compile():
    op = tileauto.torch_op(
        _name("scale"), _scale_, problem=lambda x: {"n": x.shape[0]}, mutates_args=["x"]
    )

    def f(x):
        op(x)
        return x + 1

    compiled = torch.compile(f, fullgraph=True)
    x = torch.ones(7)
    torch.testing.assert_close(compiled(x), torch.full((7,), 4.0))
    assert torch.equal(x, torch.full((7,), 3.0))


def test_an_undeclared_write_is_an_error():
    op = tileauto.torch_op(_name("copy"), _copy_and_zero, problem=lambda x: x.shape[0])
    with pytest.raises(TorchOpError, match=r"wrote into \['x'\].*mutates_args=\['x'\]"):
        op(torch.ones(4))
    declared = tileauto.torch_op(
        _name("copy"), _copy_and_zero, problem=lambda x: x.shape[0], mutates_args=["x"]
    )
    x = torch.ones(4)
    torch.testing.assert_close(declared(x), torch.ones(4))
    assert torch.equal(x, torch.zeros(4))


def test_a_refused_write_leaves_the_callers_tensor_as_it_was():
    # the check raised but left x as the kernel wrote it (zeroed): a model's weights lost
    op = tileauto.torch_op(_name("copy"), _copy_and_zero, problem=lambda x: x.shape[0])
    weights = torch.arange(1.0, 5.0)
    with pytest.raises(TorchOpError, match=r"wrote into \['x'\]"):
        op(weights)
    assert torch.equal(weights, torch.arange(1.0, 5.0))


# -- errors a user can act on --------------------------------------------------------------------


def test_problem_that_does_not_fit_the_factory():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: (*gate.shape, 1, 2, 3))
    with pytest.raises(
        TorchOpError, match=r"does not fit _silu_mul\(M, N, dtype='float32', vec=4\)"
    ):
        op(*_inputs())


def test_problem_that_leaves_a_problem_argument_unset():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape[0])
    with pytest.raises(TorchOpError, match=r"leaves \['N'\] of _silu_mul\(M, N, "):
        op(*_inputs())


def test_problem_that_sets_a_tunable():
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], verbose=False)(swiglu)
    op = tileauto.torch_op(
        _name("swiglu"), tuned, problem=lambda gate, up: {"M": gate.shape[0], "N": 4, "vec": 8}
    )
    with pytest.raises(TorchOpError, match=r"sets the tunable\(s\) \['vec'\]"):
        op(*_inputs(4, 4))


def test_a_name_already_registered():
    name = _name("swiglu")
    tileauto.torch_op(name, swiglu, problem=lambda gate, up: gate.shape)
    with pytest.raises(TorchOpError, match="already registered"):
        tileauto.torch_op(name, swiglu, problem=lambda gate, up: gate.shape)
    with pytest.raises(TorchOpError, match="namespace::op_name"):
        tileauto.torch_op("swiglu", swiglu, problem=lambda gate, up: gate.shape)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="@tileauto.autotune or @tileauto.jit"):
        tileauto.torch_op(_name("x"), _silu_mul, problem=lambda gate, up: gate.shape)
    with pytest.raises(TorchOpError, match="mutates_args names 'y'"):
        tileauto.torch_op(_name("x"), swiglu, problem=lambda x: x.shape, mutates_args=["y"])
    with pytest.raises(TorchOpError, match="returns nothing"):
        tileauto.torch_op(_name("x"), _scale_, problem=lambda x: x.shape)

    def problem(x, s: str):
        return x.shape

    with pytest.raises(TorchOpError, match="'s' is annotated"):
        tileauto.torch_op(_name("x"), swiglu, problem=problem)


def test_a_refused_backward_leaves_the_name_free():
    # the op was registered before the check: the corrected call was 'already registered'
    name = _name("swiglu")
    with pytest.raises(TypeError, match="setup_context is given without backward"):
        tileauto.torch_op(name, swiglu, problem=_problem64, setup_context=_setup)
    with pytest.raises(TypeError, match="backward must be a function, got int"):
        tileauto.torch_op(name, swiglu, problem=_problem64, backward=3)
    op = tileauto.torch_op(
        name, swiglu, problem=_problem64, backward=_backward, setup_context=_setup
    )
    gate, up = _inputs(4, 4)
    torch.testing.assert_close(op(gate, up), _reference(gate, up))


def test_a_dict_problem_is_found_again_on_the_hot_path(monkeypatch):
    # a dict (the documented form) is unhashable: every call took the first call's path
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=_problem64)
    gate, up = _inputs(4, 4)
    op(gate, up)
    first_calls = []
    slow = op._first_call
    monkeypatch.setattr(op, "_first_call", lambda args: first_calls.append(1) or slow(args))
    torch.testing.assert_close(op(gate, up), _reference(gate, up))
    assert first_calls == []
    op(*_inputs(8, 4))  # a new problem still takes it
    assert first_calls == [1]


def test_wrong_dtype_gives_the_direct_calls_error():
    op = tileauto.torch_op(_name("swiglu"), swiglu, problem=lambda gate, up: gate.shape)
    gate, up = _inputs(4, 4)
    with pytest.raises(KernelArgumentError) as direct:
        swiglu(4, 4)(gate.double(), up)
    with pytest.raises(KernelArgumentError) as through_op:
        op(gate.double(), up)
    # the direct call's error, in the op's terms: its name and argument, not main's 'G'
    assert str(through_op.value) == str(direct.value).replace(
        "main: argument 0 (parameter 'G':", f"{op.name}: argument 0 ('gate':"
    )
    assert "wrong dtype" in str(through_op.value)
    compiled = torch.compile(lambda g, u: op(g, u), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="wrong dtype"):  # said while tracing, by the fake
        compiled(gate.double(), up.double())


# -- CUDA ----------------------------------------------------------------------------------------


@pytest.mark.gpu
# the refused capture launches nothing, and torch says so when the capture ends (seen on an H200)
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")
def test_cuda_current_stream_and_cuda_graphs():
    cuda_swiglu = tileauto.jit(out_idx=[-1], target="cuda")(_cuda_silu_mul)
    op = tileauto.torch_op(_name("swiglu_cuda"), cuda_swiglu, problem=lambda gate, up: gate.shape)
    gate = torch.randn(256, 512, device="cuda")
    up = torch.randn(256, 512, device="cuda")
    stream = torch.cuda.Stream()
    op(gate, up)  # tuned (compiled) outside any capture
    with torch.cuda.stream(stream):
        for _ in range(3):
            out = op(gate, up)
    stream.synchronize()
    torch.testing.assert_close(out, _reference(gate, up), rtol=1e-5, atol=1e-5)

    compiled = torch.compile(lambda g, u: op(g, u) + 1, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up runs, then the captured graph replays
        result = compiled(gate, up)
    torch.testing.assert_close(result, _reference(gate, up) + 1, rtol=1e-5, atol=1e-5)

    graph = torch.cuda.CUDAGraph()
    new = torch.randn(128, 512, device="cuda")
    with pytest.raises(TorchOpError, match="CUDA graph capture"), torch.cuda.graph(graph):
        op(new, new)


def _cuda_silu_mul(M, N, threads=256):
    G = te.placeholder((M, N), "float32", name="G")
    U = te.placeholder((M, N), "float32", name="U")
    Out = te.compute((M, N), lambda i, j: G[i, j] * U[i, j] / (1 + te.exp(-G[i, j])), name="O")
    from tvm import s_tir

    sch = s_tir.Schedule(te.create_prim_func([G, U, Out]))
    flat = sch.fuse(*sch.get_loops(sch.get_sblock("O")))
    bx, tx = sch.split(flat, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch.mod["main"]


# -- the example model ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_mlp_example_compiles_whole_and_matches_eager(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "mlp_compile_cpu.py"
    env = {**os.environ, "TILEAUTO_CACHE_DIR": str(tmp_path / "cache")}
    args = ["--dim", "64", "--hidden", "96", "--tokens", "16", "24", "--configs", "2"]
    proc = subprocess.run(
        [sys.executable, str(example), *args], env=env, capture_output=True, text=True, timeout=540
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "graph breaks: 0" in proc.stdout
    assert "24 tokens: compiled block matches eager torch" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_bench_runs_and_prints_its_ratios(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "torch_op.py"
    proc = subprocess.run(
        [sys.executable, str(bench), "--rounds", "2", "--configs", "1"],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [
        line.split() for line in proc.stdout.splitlines() if line.strip().startswith(("1x", "512x"))
    ]
    assert [r[0] for r in rows] == ["1x16", "512x512"], proc.stdout
    assert all(r[4].endswith("x") and r[-1].endswith("x") for r in rows), proc.stdout
