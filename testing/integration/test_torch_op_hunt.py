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
