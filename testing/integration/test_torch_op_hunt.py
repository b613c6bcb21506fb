"""``tileauto.torch_op`` and the direct kernel call: the bugs of a user's hunt, each one fixed.

Real TVM compiles for this CPU, tiny shapes; graphs are traced by dynamo with the eager backend
(the op's fake is what these tests need). Op names are unique per test.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import torch
from tvm import te
from tvm import tirx as tir

import tileauto
import tileauto.language as T
from tileauto.errors import KernelArgumentError
from tileauto.ops import TorchOpError

_names = itertools.count()


def _name(stem: str) -> str:
    return f"tileauto_hunt::{stem}_{next(_names)}"


@tileauto.jit(out_idx=[-1], target="llvm")
def _scale(M, N):
    """B = A * alpha (alpha: a float32 scalar parameter of the kernel)."""
    A = te.placeholder((M, N), "float32", name="A")
    alpha = tir.Var("alpha", "float32")
    B = te.compute((M, N), lambda i, j: A[i, j] * alpha, name="B")
    return te.create_prim_func([A, alpha, B])


@tileauto.jit(out_idx=[-1], target="llvm")
def _double(M, N):
    A = te.placeholder((M, N), "float32", name="A")
    return te.create_prim_func([A, te.compute((M, N), lambda i, j: A[i, j] * 2, name="B")])


@tileauto.jit(out_idx=[-1], target="llvm")
def _add(M, N):
    A = te.placeholder((M, N), "float32", name="A")
    B = te.placeholder((M, N), "float32", name="B")
    return te.create_prim_func([A, B, te.compute((M, N), lambda i, j: A[i, j] + B[i, j], name="C")])


@tileauto.jit(out_idx=[-1], target="llvm")
def _add1(M):
    A = te.placeholder((M,), "float32", name="A")
    B = te.placeholder((M,), "float32", name="B")
    return te.create_prim_func([A, B, te.compute((M,), lambda i: A[i] + B[i], name="C")])


@tileauto.jit(out_idx=[-1], target="llvm")
def _scale_by_tensor(M):
    """B = A * S, S a 0-dim tensor."""
    A = te.placeholder((M,), "float32", name="A")
    S = te.placeholder((), "float32", name="S")
    return te.create_prim_func([A, S, te.compute((M,), lambda i: A[i] * S[()], name="B")])


@tileauto.jit(out_idx=[-1], target="llvm")
def _repeat2_plus(M, K):
    """O = [A, A] + B[0]: 2 * M elements, static shapes; K is B's length."""
    A = te.placeholder((M,), "float32", name="A")
    B = te.placeholder((K,), "float32", name="B")
    return te.create_prim_func([A, B, te.compute((2 * M,), lambda i: A[i % M] + B[0], name="O")])


# -- 1. a misaligned tensor subclass: a KernelArgumentError, never a crash -------------------

_MISALIGNED = """
import torch
from tvm import s_tir, te
import tileauto

@tileauto.jit(out_idx=[-1], target="llvm")
def swiglu(M, N, vec=8):
    G = te.placeholder((M, N), "float32", name="G")
    U = te.placeholder((M, N), "float32", name="U")
    O = te.compute((M, N), lambda i, j: G[i, j] * U[i, j], name="O")
    sch = s_tir.Schedule(te.create_prim_func([G, U, O]))
    _, j = sch.get_loops(sch.get_sblock("O"))
    sch.vectorize(sch.split(j, [None, vec])[1])
    return sch.mod["main"]

class Sub(torch.Tensor):
    pass

k = swiglu(4, 16)
op = tileauto.torch_op("tileauto_hunt::misaligned", swiglu, problem=lambda gate, up: gate.shape)
u = torch.randn(4, 16)
base = torch.randn(4 * 16 + 1)
view = base[1:].view(4, 16)
assert view.data_ptr() % 64
for label, call, x in [
    ("param", k, torch.nn.Parameter(view, requires_grad=False)),
    ("sub", k, view.as_subclass(Sub)),
    ("op_param", op, torch.nn.Parameter(view, requires_grad=False)),
]:
    try:
        call(x, u)
        print(label, "ran")
    except tileauto.KernelArgumentError as exc:
        assert "64-byte aligned" in str(exc), exc
        print(label, "refused")
"""


def test_a_misaligned_tensor_subclass_is_refused_not_a_crash(tmp_path):
    # the C call slot checked exact torch.Tensors only: a Parameter or as_subclass view
    # reached the kernel's aligned vector loads and the process died (SIGSEGV)
    script = tmp_path / "misaligned.py"
    script.write_text(_MISALIGNED)
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=dict(os.environ)
    )
    assert run.returncode == 0, f"exit {run.returncode}: {run.stdout}\n{run.stderr[-2000:]}"
    assert run.stdout.split() == ["param", "refused", "sub", "refused", "op_param", "refused"]


# -- 2. scalar arguments with a default ---------------------------------------------------------


def test_a_scalar_left_at_its_default_reaches_the_kernel():
    # torch drops trailing arguments equal to their default before it calls the op
    def problem(a, alpha: float = 2.0):
        return a.shape

    op = tileauto.torch_op(_name("scale"), _scale, problem=problem)
    a = torch.randn(2, 4)
    torch.testing.assert_close(op(a), a * 2)  # the op's first call
    torch.testing.assert_close(op(a, 2.0), a * 2)
    torch.testing.assert_close(op(a, alpha=2.0), a * 2)
    torch.testing.assert_close(op(a, 3.0), a * 3)
    compiled = torch.compile(lambda a: op(a), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(a), a * 2)


def test_a_kernel_of_the_tensors_alone_whatever_order_the_defaults_come_in():
    def problem(a, slope: float = 0.1):
        return a.shape

    op = tileauto.torch_op(_name("double"), _double, problem=problem)
    a = torch.randn(2, 4)
    torch.testing.assert_close(op(a), a * 2)  # remembered: the kernel takes the tensor alone
    torch.testing.assert_close(op(a, 0.5), a * 2)


# -- 3. a 0-dim tensor input --------------------------------------------------------------------


def test_a_zero_dim_tensor_input():
    op = tileauto.torch_op(_name("scale0"), _scale_by_tensor, problem=lambda x, s: x.shape[0])
    x, s = torch.randn(8), torch.tensor(3.0)
    torch.testing.assert_close(op(x, s), x * 3)


# -- 4, 5. the fake's output sizes ---------------------------------------------------------------


def test_a_static_dim_before_a_symbolic_one_of_the_same_example_size():
    op = tileauto.torch_op(_name("add"), _add, problem=lambda a, b: a.shape)
    compiled = torch.compile(lambda a, b: op(a, b) * 2, fullgraph=True, backend="eager")
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    torch._dynamo.mark_dynamic(a, 1)
    torch._dynamo.mark_dynamic(b, 1)
    torch.testing.assert_close(compiled(a, b), (a + b) * 2)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    torch.testing.assert_close(compiled(a, b), (a + b) * 2)


def test_an_extent_that_only_coincides_with_a_size_is_refused_at_the_trace():
    # 2 * M equals K at the example: the fake wrote the output as (K,), and the compiled
    # function failed (or was wrong) for every size where 2 * M != K
    problem = lambda a, b: (a.shape[0], b.shape[0])  # noqa: E731
    op = tileauto.torch_op(_name("rep2"), _repeat2_plus, problem=problem)
    compiled = torch.compile(
        lambda a, b: op(a, b) * 2, fullgraph=True, dynamic=True, backend="eager"
    )
    with pytest.raises(Exception, match=r"does not follow .*out_shapes") as info:
        compiled(torch.randn(8), torch.randn(16))
    assert isinstance(info.value, TorchOpError) or "TorchOpError" in repr(info.value)
    given = tileauto.torch_op(
        _name("rep2"), _repeat2_plus, problem=problem, out_shapes=lambda a, b: [(2 * a.shape[0],)]
    )
    compiled = torch.compile(
        lambda a, b: given(a, b) * 2, fullgraph=True, dynamic=True, backend="eager"
    )
    for m, k in ((8, 16), (4, 16), (8, 3)):
        a, b = torch.randn(m), torch.randn(k)
        torch.testing.assert_close(compiled(a, b), (torch.cat([a, a]) + b[0]) * 2)


# -- 6. mixed devices ------------------------------------------------------------------------


def test_a_cpu_and_a_meta_tensor_are_refused():
    op = tileauto.torch_op(_name("add"), _add1, problem=lambda a, b: a.shape)
    with pytest.raises(TorchOpError, match=r"different devices: 'a' .* cpu and 'b' .* meta"):
        op(torch.randn(4), torch.randn(4, device="meta"))


# -- 7. empty tensors of torch's strides ------------------------------------------------------


def test_an_empty_tensor_with_torchs_own_strides():
    x, y = torch.randn(3, 0), torch.randn(3, 0)
    assert x.stride() == (1, 1)  # what TVM's compact stride check refused
    assert _add(3, 0)(x, y).shape == (3, 0)
    out = torch.empty(3, 0)
    assert _add(3, 0)(x, y, out) is out  # destination passing
    op = tileauto.torch_op(_name("add"), _add, problem=lambda a, b: a.shape)
    assert op(x, y).shape == (3, 0)


# -- 8. a data-dependent size ---------------------------------------------------------------


def _nonzero_rows(op):
    def f(x, u):
        idx = torch.nonzero(x[:, 0] > 0).squeeze(1)
        return op(x[idx], u[idx])

    return f


def test_a_data_dependent_size_with_out_shapes():
    x, u = torch.randn(8, 4), torch.randn(8, 4)
    x[:3, 0], x[3:, 0] = 1.0, -1.0
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        bare = tileauto.torch_op(_name("add"), _add, problem=lambda a, b: a.shape)
        compiled = torch.compile(_nonzero_rows(bare), fullgraph=True, backend="eager")
        with pytest.raises(Exception, match=r"data-dependent size.*out_shapes") as info:
            compiled(x, u)
        assert "TorchOpError" in repr(info.value) or isinstance(info.value, TorchOpError)
        given = tileauto.torch_op(
            _name("add"), _add, problem=lambda a, b: a.shape, out_shapes=lambda a, b: [a.shape]
        )
        compiled = torch.compile(_nonzero_rows(given), fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(x, u), x[:3] + u[:3])


# -- 9. a problem that raises in eager ----------------------------------------------------------


def test_a_problem_that_raises_in_eager_names_the_op():
    op = tileauto.torch_op(_name("add"), _add1, problem=lambda a, b: a.shape[1])
    with pytest.raises(TorchOpError, match=r"problem\(a, b\) raised IndexError"):
        op(torch.randn(4), torch.randn(4))


# -- 10. op names ---------------------------------------------------------------------------


@pytest.mark.parametrize("op_name", ["name", "_dir", "__init__", "def"])
def test_a_name_torch_cannot_hold_is_refused_and_stays_free(op_name):
    name = f"tileauto_hunt_names::{op_name}"
    for _ in range(2):  # the retry is refused the same way, never "already registered"
        with pytest.raises(TorchOpError, match="choose another name") as info:
            tileauto.torch_op(name, _add1, problem=lambda a, b: a.shape)
        assert "already registered" not in str(info.value)


def test_a_registration_torch_refuses_leaves_the_name_free(monkeypatch):
    from torch._library.custom_ops import CustomOpDef

    def refuse(self, fn):
        raise RuntimeError("refused")

    name = _name("add")
    with monkeypatch.context() as patch:
        patch.setattr(CustomOpDef, "register_fake", refuse)
        with pytest.raises(TorchOpError, match="torch refused to register"):
            tileauto.torch_op(name, _add1, problem=lambda a, b: a.shape)
    op = tileauto.torch_op(name, _add1, problem=lambda a, b: a.shape)
    a = torch.randn(4)
    torch.testing.assert_close(op(a, a), a + a)


# -- 12. errors in the op's terms ----------------------------------------------------------------


def test_errors_name_the_ops_argument():
    def problem(x, scale: float, y):
        return x.shape[0]

    op = tileauto.torch_op(_name("add"), _add1, problem=problem)
    x = torch.randn(8)
    torch.testing.assert_close(op(x, 1.0, x), x + x)
    with pytest.raises(KernelArgumentError, match=r"::add_\d+: argument 2 \('y': wrong dtype"):
        op(x, 1.0, x.double())
    with pytest.raises(KernelArgumentError, match=r"argument 2 \('y': wrong shape"):
        op(x, 1.0, torch.randn(4))
    compiled = torch.compile(lambda x, y: op(x, 1.0, y), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=r"argument 2 \('y': wrong dtype"):
        compiled(x, x.double())


def test_errors_of_the_first_call_name_the_ops_argument():
    def problem(x, scale: float, y):
        return x.shape[0]

    op = tileauto.torch_op(_name("add"), _add1, problem=problem)
    with pytest.raises(KernelArgumentError, match=r"argument 2 \('y': wrong shape"):
        op(torch.randn(8), 1.0, torch.randn(4))


# -- 13. keyword arguments to a kernel -----------------------------------------------------------


def test_keyword_arguments_to_a_kernel_are_named_as_such():
    from tileauto.jit.kernel import _C_CALL

    if not _C_CALL:
        pytest.skip("the C call slot is not built: __call__ is the Python method")
    k = _add1(4)
    with pytest.raises(TypeError, match=r"main: a kernel takes its tensors positionally") as info:
        k(torch.randn(4), B=torch.randn(4))
    assert "_call_python" not in str(info.value)


# -- hunt B: scalar arguments, tuned configs and the fake ---------------------------------------


@tileauto.jit(out_idx=[-1], target="llvm")
def _twice_in(n, mode=2):
    """B = 2 * A: int32 for mode 3, float32 for any other mode."""
    A = te.placeholder((n,), "float32", name="A")
    odt = "int32" if mode == 3 else "float32"
    return te.create_prim_func([A, te.compute((n,), lambda i: (A[i] * 2).astype(odt), name="B")])


@tileauto.jit(out_idx=[-1], target="llvm")
def _head_or_all(n, mode=2):
    """B = 10 * A[:m]: m = n for mode 3, 1 for any other mode."""
    A = te.placeholder((n,), "float32", name="A")
    m = n if mode == 3 else 1
    return te.create_prim_func([A, te.compute((m,), lambda i: A[i] * 10, name="B")])


def _mode_problem(x, mode: int):
    return {"n": x.shape[0], "mode": mode}


def _counted(graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_a_scalar_that_chooses_the_output_dtype_is_guarded(dynamic):
    # mode was symbolic (dynamic=True, or automatic dynamic at its second value) and the fake
    # read its example value without a guard: the graph traced at mode=2 served mode=3, and
    # read its int32 output as float32
    op = tileauto.torch_op(_name("twice_in"), _twice_in, problem=_mode_problem)
    graphs: list = []
    compiled = torch.compile(
        lambda x, mode: op(x, mode) + 0.5, fullgraph=True, dynamic=dynamic, backend=_counted(graphs)
    )
    x = torch.arange(4, dtype=torch.float32) + 0.25
    for mode in (2, 4, 3, 2):
        got, want = compiled(x, mode), op(x, mode) + 0.5
        assert got.dtype == want.dtype, (mode, got.dtype, want.dtype)
        torch.testing.assert_close(got, want)
    assert len(graphs) == 3  # one graph per mode; mode=2 again is served by its graph


def test_a_scalar_that_chooses_the_output_length_is_guarded():
    op = tileauto.torch_op(_name("head_or_all"), _head_or_all, problem=_mode_problem)
    compiled = torch.compile(lambda x, mode: op(x, mode) + 1, fullgraph=True, dynamic=True)
    x = torch.arange(8, dtype=torch.float32)
    for mode in (2, 3):
        torch.testing.assert_close(compiled(x, mode), op(x, mode) + 1)


class _Mode(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x, mode: int):
        return self.op(x, mode) + 0.5


def test_export_keeps_a_scalar_that_chooses_the_kernel_static():
    op = tileauto.torch_op(_name("twice_in"), _twice_in, problem=_mode_problem)
    x = torch.arange(4, dtype=torch.float32)
    program = torch.export.export(_Mode(op), (x, 3))
    torch.testing.assert_close(program.module()(x, 3), op(x, 3) + 0.5)
    with pytest.raises(Exception, match=r"specialized it to be a constant \(3\)"):
        torch.export.export(_Mode(op), (x, 3), dynamic_shapes=(None, torch.export.Dim.DYNAMIC))


def test_a_data_dependent_scalar_that_chooses_the_kernel_is_refused_by_name():
    op = tileauto.torch_op(_name("twice_in"), _twice_in, problem=_mode_problem)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        compiled = torch.compile(
            lambda x, t: op(x, (t * 2 - t).sum().item()), fullgraph=True, backend="eager"
        )
        with pytest.raises(
            Exception, match=r"data-dependent value .* scalar argument\(s\) \['mode'\]"
        ):
            compiled(torch.ones(4), torch.tensor(3))


def test_the_tensors_sizes_stay_symbolic_beside_a_guarded_scalar():
    op = tileauto.torch_op(_name("twice_in"), _twice_in, problem=_mode_problem)
    graphs: list = []
    compiled = torch.compile(
        lambda x, mode: op(x, mode) * 2, fullgraph=True, dynamic=True, backend=_counted(graphs)
    )
    for n in (5, 7, 9):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x, 2), x * 4)
    assert len(graphs) == 1  # the size n stays symbolic: one trace for every size


@tileauto.jit(out_idx=[-1], target="llvm")
def _twice_as(n, odt="float32"):
    A = te.placeholder((n,), "float32", name="A")
    return te.create_prim_func([A, te.compute((n,), lambda i: (A[i] * 2).astype(odt), name="B")])


def test_a_tuned_config_of_another_output_dtype_is_caught_after_a_trace():
    # the check after a trace compared the output shapes alone: the graph read the tuned
    # config's float64 output as the fake's float32
    tuned = tileauto.autotune(configs=[{"odt": "float64"}], warmup=1, rep=2, verbose=False)(
        _twice_as
    )
    op = tileauto.torch_op(_name("twice_as"), tuned, problem=lambda x: x.shape[0])
    compiled = torch.compile(lambda x: op(x) + 1, fullgraph=True, backend="eager")
    with pytest.raises(
        TorchOpError,
        match=r"\[\(\(4,\), 'float64'\)\] where the op's fake says \[\(\(4,\), 'float32'\)\]",
    ):
        compiled(torch.arange(4, dtype=torch.float32))


@tileauto.jit(out_idx=[-1], target="llvm")
def _twice_by_size(n):
    """B = 2 * A, in float64 from n = 16 on: an output dtype that depends on a size."""
    A = te.placeholder((n,), "float32", name="A")
    odt = "float64" if n >= 16 else "float32"
    return te.create_prim_func([A, te.compute((n,), lambda i: (A[i] * 2).astype(odt), name="B")])


def test_an_output_dtype_that_changes_with_a_symbolic_size_is_refused_at_the_trace():
    op = tileauto.torch_op(_name("by_size"), _twice_by_size, problem=lambda x: x.shape[0])
    dynamic = torch.compile(lambda x: op(x) + 1, fullgraph=True, dynamic=True, backend="eager")
    with pytest.raises(Exception, match=r"output dtypes are \['float32'\] at these sizes and "):
        dynamic(torch.randn(8))
    # traced at 4: float32 at 8 too, float64 at 1,024 times (it was not seen)
    op4 = tileauto.torch_op(_name("by_size"), _twice_by_size, problem=lambda x: x.shape[0])
    dynamic = torch.compile(lambda x: op4(x) + 1, fullgraph=True, dynamic=True, backend="eager")
    with pytest.raises(Exception, match=r"\['float64'\] at 1024 times the symbolic ones"):
        dynamic(torch.randn(4))
    static = torch.compile(lambda x: op(x) + 1, fullgraph=True, backend="eager")
    for n in (8, 20):  # static sizes: each size its own graph, of its own dtype
        x = torch.randn(n)
        torch.testing.assert_close(static(x), op(x) + 1)


@tileauto.jit(out_idx=[-1], target="llvm")
def _double_by_blocks(n, block=16):
    """B = 2 * A, in blocks that must divide n (the default, 16, does not divide 12 or 24)."""
    assert n % block == 0, f"block {block} must divide n={n}"
    A = te.placeholder((n,), "float32", name="A")
    return te.create_prim_func([A, te.compute((n,), lambda i: A[i] * 2, name="B")])


def test_a_problem_the_default_config_cannot_build_after_a_trace():
    # the check after a trace elaborated the default config (block=16), which asserts for
    # n=24, so a plain eager call failed once anything had been traced; and the trace of
    # n=12 failed although the space's block=4 builds it
    tuned = tileauto.autotune(
        configs=[{"block": 4}, {"block": 16}], warmup=1, rep=2, verbose=False
    )(_double_by_blocks)
    op = tileauto.torch_op(_name("blocks"), tuned, problem=lambda x: x.shape[0])
    compiled = torch.compile(lambda x: op(x) + 1, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(16)), torch.full((16,), 3.0))
    torch.testing.assert_close(op(torch.ones(24)), torch.full((24,), 2.0))  # eager
    torch.testing.assert_close(compiled(torch.ones(12)), torch.full((12,), 3.0))  # traced


def test_a_problem_no_config_builds_is_refused_at_the_trace_and_eager_still_works():
    tuned = tileauto.autotune(configs=[{"block": 4}, {"block": 6}], warmup=1, rep=2, verbose=False)(
        _double_by_blocks
    )
    op = tileauto.torch_op(_name("blocks"), tuned, problem=lambda x: x.shape[0])
    compiled = torch.compile(lambda x: op(x) + 1, fullgraph=True, backend="eager")
    with pytest.raises(
        Exception, match=r"block 16 must divide n=7.*nor does the space: its first 16 configs"
    ):
        compiled(torch.ones(7))
    torch.testing.assert_close(op(torch.ones(12)), torch.full((12,), 2.0))


@tileauto.jit(out_idx=[-1], target="llvm")
def _add_k(n, block=4):
    """B = A + k, k an int32 scalar parameter of the kernel (no value tileauto can make)."""
    A = te.placeholder((n,), "int32", name="A")
    k = tir.Var("k", "int32")
    B = te.compute((n,), lambda i: A[i] + k, name="B")
    return te.create_prim_func([A, k, B])


@tileauto.jit(out_idx=[-1], target="llvm")
def _repeat2_tuned(dtype="float32", unroll=1):
    """B = [A, A] for any length n (a size variable: no shape tileauto can make inputs of)."""

    @T.prim_func
    def main(a: T.handle, b: T.handle):
        n = T.int32()
        A = T.match_buffer(a, (n,), dtype)
        B = T.match_buffer(b, (n * 2,), dtype)
        for i in range(n):
            B[i] = A[i]
            B[i + n] = A[i]

    return main


def test_a_scalar_the_kernel_takes_stays_symbolic():
    # k reaches the kernel, not the problem: nothing to guard, one trace for every value
    def problem(x, k: int):
        return x.shape[0]

    op = tileauto.torch_op(_name("add_k"), _add_k, problem=problem)
    graphs: list = []
    compiled = torch.compile(
        lambda x, k: op(x, k) * 2, fullgraph=True, dynamic=True, backend=_counted(graphs)
    )
    x = torch.arange(8, dtype=torch.int32)
    for k in (5, 7, 9):
        assert torch.equal(compiled(x, k), (x + k) * 2)
    assert len(graphs) == 1


def test_an_autotuned_op_tunes_on_its_own_arguments_where_tileauto_cannot_make_them():
    # the tuning asked for set_autotune_inputs although the op holds the very inputs
    def problem(x, k: int):
        return x.shape[0]

    tuned = tileauto.autotune(configs=[{"block": 4}, {"block": 8}], warmup=1, rep=2, verbose=False)
    op = tileauto.torch_op(_name("add_k"), tuned(_add_k), problem=problem)
    x = torch.arange(16, dtype=torch.int32)
    assert torch.equal(op(x, 5), x + 5)
    assert torch.equal(x, torch.arange(16, dtype=torch.int32))  # the tuning works on copies

    sym = tileauto.autotune(configs=[{"unroll": 1}, {"unroll": 2}], warmup=1, rep=2, verbose=False)
    op = tileauto.torch_op(
        _name("repeat2"), sym(_repeat2_tuned), problem=lambda a: {"dtype": "float32"}
    )
    a = torch.randn(10)
    torch.testing.assert_close(op(a), torch.cat([a, a]))


@tileauto.jit(out_idx=[-1], target="llvm")
def _times_const(n, d=1.0):
    """B = A * d, with d baked into the kernel (a problem value, not a kernel argument)."""
    A = te.placeholder((n,), "float32", name="A")
    return te.create_prim_func(
        [A, te.compute((n,), lambda i: A[i] * tir.const(d, "float32"), name="B")]
    )


@pytest.mark.parametrize("problem", ["tuple", "dict"])
def test_a_negative_zero_and_a_nan_problem_find_their_own_kernels(problem):
    # -0.0 == 0.0 served 0.0's kernel for -0.0; nan != nan made every call with a NaN take the
    # first-call path and keep one more kernel
    if problem == "tuple":
        op = tileauto.torch_op(
            _name("times"), _times_const, problem=lambda x, d=1.0: (x.shape[0], d)
        )
    else:
        op = tileauto.torch_op(
            _name("times"), _times_const, problem=lambda x, d=1.0: {"n": x.shape[0], "d": d}
        )
    x = torch.ones(4)
    assert op(x, 0.0).tolist() == [0.0] * 4
    out = op(x, -0.0)
    assert torch.equal(torch.signbit(out), torch.ones(4, dtype=torch.bool))  # -0.0 each
    assert not torch.signbit(op(x, 0.0)).any()
    for _ in range(3):
        assert op(x, float("nan")).isnan().all()
    assert op(x, 2.0).tolist() == [2.0] * 4
    assert len(op.kernels()) == 4  # 0.0, -0.0, nan (once), 2.0


# -- the second hunt (after the op's problem side moved to ops/_problem.py) ----------------------
def _vec_double(M, N, vec=4):
    """B = A * 2 (``vec``: a tunable the result does not depend on)."""
    A = te.placeholder((M, N), "float32", name="A")
    return te.create_prim_func([A, te.compute((M, N), lambda i, j: A[i, j] * 2, name="B")])


_vec_jit = tileauto.jit(out_idx=[-1], target="llvm")(_vec_double)


@pytest.mark.parametrize(
    "configs",
    [lambda M, N: [{"vec": 2}, {"vec": 4}], ({"vec": 2}, {"vec": 4})],
    ids=["callable", "tuple"],
)
def test_a_problem_setting_a_tunable_of_a_callable_or_tuple_space_is_refused(configs):
    tuned = tileauto.autotune(configs=configs, warmup=0, rep=2, verbose=False)(_vec_jit)
    op = tileauto.torch_op(
        _name("settunable"),
        tuned,
        problem=lambda a: {"M": a.shape[0], "N": a.shape[1], "vec": 2},
    )
    with pytest.raises(TorchOpError, match=r"sets the tunable\(s\) \['vec'\]"):
        op(torch.randn(4, 8))


def test_a_problem_leaving_out_an_argument_a_callable_space_needs_names_the_op():
    tuned = tileauto.autotune(configs=lambda M, N: [{"vec": 2}], warmup=0, rep=2, verbose=False)(
        _vec_jit
    )
    name = _name("leavesout")
    op = tileauto.torch_op(name, tuned, problem=lambda a: {"M": a.shape[0]})
    with pytest.raises(TorchOpError, match=f"{name}: problem returned"):
        op(torch.randn(4, 8))


@tileauto.jit(out_idx=[-1], target="llvm")
def _torch_constants(n):
    """B = A * c, c computed with torch in the factory's body (a constant baked in)."""
    c = float(torch.arange(1, 3).float().sum())  # 3.0
    A = te.placeholder((n,), "float32", name="A")
    return te.create_prim_func([A, te.compute((n,), lambda i: A[i] * c, name="B")])


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_factory_that_computes_with_torch_traces(dynamic):
    # the fake elaborated the factory under FakeTensorMode: torch.arange gave a fake tensor
    op = tileauto.torch_op(_name("torchbody"), _torch_constants, problem=lambda a: a.shape[0])
    f = torch.compile(lambda a: op(a) + 1, fullgraph=True, dynamic=dynamic, backend="eager")
    a = torch.randn(8)
    torch.testing.assert_close(f(a), a * 3 + 1)


def test_a_model_holding_an_op_deep_copies_and_says_how_to_pickle():
    import copy
    import pickle

    op = tileauto.torch_op(_name("copied"), _double, problem=lambda a: a.shape)
    model = torch.nn.Module()
    model.op = op
    assert copy.deepcopy(model).op is op and copy.copy(op) is op
    with pytest.raises(TypeError, match="cannot be pickled.*state_dict"):
        pickle.dumps(op)


def test_a_tensor_parameter_with_a_default_is_refused_by_name():
    def problem(a, bias: torch.Tensor = None):
        return a.shape

    with pytest.raises(TorchOpError, match="'bias' is a tensor with a default"):
        tileauto.torch_op(_name("optbias"), _add, problem=problem)


@pytest.mark.parametrize("given", ["none", "int", "float dim"])
def test_out_shapes_of_the_wrong_form_are_named(given):
    shapes = {
        "none": lambda a: None,
        "int": lambda a: 8,
        "float dim": lambda a: [(a.shape[0], 2.5)],
    }[given]
    op = tileauto.torch_op(
        _name("outshapes"), _double, problem=lambda a: a.shape, out_shapes=shapes
    )
    f = torch.compile(lambda a: op(a), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="out_shapes returned") as info:
        f(torch.randn(4, 2))
    assert "TorchOpError" in repr(info.value) or isinstance(info.value, TorchOpError)


def test_an_op_argument_named_self_is_passed_by_keyword():
    def problem(self, other):
        return self.shape

    op = tileauto.torch_op(_name("selfarg"), _add, problem=problem)
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(op(self=a, other=b), a + b)


@tileauto.jit(out_idx=[-1], target="llvm")
def _head16(M):
    """O = A[:min(M, 16)] + 1: an extent that follows M only up to 16."""
    A = te.placeholder((M,), "float32", name="A")
    return te.create_prim_func([A, te.compute((min(M, 16),), lambda i: A[i] + 1, name="O")])


def test_an_extent_that_follows_a_size_only_up_to_a_point_is_refused_at_the_trace():
    # traced at M = 4, min(M, 16) doubles with M (8 at M = 8): the fake wrote the output as
    # (M,), and the compiled graph read a 16-long output as M long at M = 40 (the eager
    # backend: garbage past 16; Inductor: "incorrect fake")
    op = tileauto.torch_op(_name("head16"), _head16, problem=lambda a: a.shape[0])
    compiled = torch.compile(lambda a: op(a) * 2, fullgraph=True, dynamic=True, backend="eager")
    with pytest.raises(
        Exception,
        match=r"but 16 at 1024 times them \(not 4096\): it follows the sizes only up to a point",
    ) as info:
        compiled(torch.randn(4))
    assert isinstance(info.value, TorchOpError) or "TorchOpError" in repr(info.value)
    given = tileauto.torch_op(
        _name("head16"), _head16, problem=lambda a: a.shape[0],
        out_shapes=lambda a: [(min(a.shape[0], 16),)],
    )  # fmt: skip
    compiled = torch.compile(lambda a: given(a) * 2, fullgraph=True, dynamic=False, backend="eager")
    for m in (4, 40):
        a = torch.randn(m)
        torch.testing.assert_close(compiled(a), (a[:16] + 1) * 2)
