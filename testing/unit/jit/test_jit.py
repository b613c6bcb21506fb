"""Tests of tileauto.jit: @jit, JITKernel, targets, CompileArgs and par_compile, on real CPU kernels.

The factories are in ``kernels.py`` next to this file (compile workers import them by name).
Kernels that several tests only call are compiled once per module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import kernels
import numpy as np
import pytest
import torch
import tvm
from tvm.target import Target, codegen

import tileauto
from tileauto import CompileError, CompileFailure, JITImpl, JITKernel, KernelArgumentError
from tileauto.build.builder import BuildStatus
from tileauto.jit import target as target_mod
from tileauto.jit.compiler import compile_to_dir
from tileauto.jit.target import device_type_of, resolve_target, target_json
from tileauto.options import CompileArgs

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
CUDA_SM90 = {"kind": "cuda", "arch": "sm_90"}
CUDA_RUNTIME = tvm.runtime.enabled("cuda")


@pytest.fixture(scope="module")
def add64() -> JITKernel:
    """``C = A + B`` on 64 float32, compiled once for the module."""
    return tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(64)


@pytest.fixture(scope="module")
def dyn_add() -> JITKernel:
    return tileauto.jit(out_idx=[-1], target="llvm")(kernels.dyn_add)()


@pytest.fixture
def no_disk_cache(monkeypatch):
    """Count real compiles: a disk kernel cache would turn a second compile into a load."""
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")


# -- elaborate, compile, call ----------------------------------------------------------------------


def test_jit_returns_a_jit_impl():
    impl = tileauto.jit(kernels.vector_add)
    assert isinstance(impl, JITImpl)
    assert impl.__name__ == "vector_add" and impl.__doc__ == kernels.vector_add.__doc__
    assert impl.compile_args == CompileArgs()
    with_args = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    assert with_args.compile_args.out_idx == (-1,)
    assert "vector_add" in repr(with_args)


def test_jit_rejects_a_non_callable():
    with pytest.raises(TypeError, match="kernel factory"):
        tileauto.jit(out_idx=[-1])(42)


def test_compile_returns_a_jit_kernel_that_computes(add64):
    assert isinstance(add64, JITKernel)
    a, b = torch.randn(64), torch.randn(64)
    c = add64(a, b)
    assert isinstance(c, torch.Tensor)
    assert c.shape == (64,) and c.dtype == torch.float32
    torch.testing.assert_close(c, a + b)
    assert add64.num_inputs == 2
    assert [p.name for p in add64.params] == ["A", "B", "C"]
    assert "out_idx=[2]" in repr(add64)


def test_outputs_are_fresh_tensors_each_call(add64):
    a, b = torch.ones(64), torch.ones(64)
    first, second = add64(a, b), add64(a, b)
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, second)


def test_inputs_are_not_modified(add64):
    a, b = torch.randn(64), torch.randn(64)
    a0, b0 = a.clone(), b.clone()
    add64(a, b)
    assert torch.equal(a, a0) and torch.equal(b, b0)


def test_same_arguments_return_the_same_kernel(no_disk_cache):
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    k1 = impl(64)
    assert impl.compile_count == 1
    assert impl(64) is k1
    assert impl(n=64) is k1
    assert impl(64, block=16) is k1  # the default, spelled out
    assert impl(64, 16, "float32") is k1
    assert impl.compile_count == 1
    k2 = impl(64, block=8)
    assert k2 is not k1 and impl.compile_count == 2
    assert k2.config == {"block": 8, "dtype": "float32"}


def test_bad_call_of_the_factory_is_a_type_error_naming_it():
    impl = tileauto.jit(out_idx=[-1])(kernels.vector_add)
    with pytest.raises(TypeError, match=r"vector_add\(n: .*unexpected keyword argument .blok."):
        impl(64, blok=3)
    with pytest.raises(TypeError, match="vector_add"):
        impl()


def test_config_and_target(add64):
    assert add64.config == {"block": 16, "dtype": "float32"}
    add64.config["block"] = 0  # a copy: the kernel's config cannot be changed from outside
    assert add64.config["block"] == 16
    assert isinstance(add64.target, Target)
    assert add64.target.kind.name == "llvm"
    assert add64.target.attrs["mcpu"] == codegen.llvm_get_system_cpu()
    assert add64.func_name == "main"


def test_int_and_float64_dtypes():
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    ki = impl(32, block=8, dtype="int32")
    a = torch.arange(32, dtype=torch.int32)
    assert torch.equal(ki(a, a), 2 * a)
    kd = impl(32, block=8, dtype="float64")
    x = torch.randn(32, dtype=torch.float64)
    assert kd(x, x).dtype == torch.float64
    torch.testing.assert_close(kd(x, x), 2 * x)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_dtypes_torch_has(dtype):
    # torch has them since 2.3: "has no torch equivalent" was false
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(32, block=8, dtype=dtype)
    a = torch.arange(32, dtype=torch.int64).to(getattr(torch, dtype))
    assert k(a, a).dtype == a.dtype and torch.equal(k(a, a).to(torch.int64), 2 * a.to(torch.int64))


def test_output_dtype_differs_from_input():
    k = tileauto.jit(out_idx=-1, target="llvm")(kernels.cast_int)(8)
    out = k(torch.full((8,), 2.5))
    assert out.dtype == torch.int32
    assert torch.equal(out, torch.full((8,), 6, dtype=torch.int32))


# -- out_idx ---------------------------------------------------------------------------------------


def test_out_idx_none_means_destination_passing():
    k = tileauto.jit(target="llvm")(kernels.vector_add)(64)
    a, b, c = torch.randn(64), torch.randn(64), torch.zeros(64)
    assert k(a, b, c) is None
    torch.testing.assert_close(c, a + b)
    assert k.num_inputs == 3


@pytest.mark.parametrize("out_idx", [-1, 2, [-1], [2], (2,)])
def test_out_idx_single_output(out_idx):
    k = tileauto.jit(out_idx=out_idx, target="llvm")(kernels.vector_add)(16, block=8)
    a, b = torch.randn(16), torch.randn(16)
    out = k(a, b)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, a + b)


@pytest.mark.parametrize("out_idx", [[1, 2], [-2, -1], [2, 1]])
def test_out_idx_several_outputs_give_a_tuple(out_idx):
    k = tileauto.jit(out_idx=out_idx, target="llvm")(kernels.scale_shift)(3, 5)
    a = torch.randn(3, 5)
    out = k(a)
    assert isinstance(out, tuple) and len(out) == 2
    b, c = out  # in parameter order, whatever the order of out_idx
    torch.testing.assert_close(b, a * 2)
    torch.testing.assert_close(c, a + 1)


def test_out_idx_first_parameter_as_output():
    k = tileauto.jit(out_idx=[0], target="llvm")(kernels.dyn_double)()
    # A (param 0) is allocated; its symbolic n is bound by B, the only input.
    b = torch.randn(5, 4)
    a = k(b)
    assert a.shape == (5, 4)


@pytest.mark.parametrize("out_idx", [3, -4, [0, 5]])
def test_out_idx_out_of_range_is_a_compile_error(out_idx):
    impl = tileauto.jit(out_idx=out_idx, target="llvm")(kernels.vector_add)
    with pytest.raises(CompileError, match="out of range"):
        impl(8, block=8)


def test_out_idx_naming_a_parameter_twice():
    impl = tileauto.jit(out_idx=[2, -1], target="llvm")(kernels.vector_add)
    with pytest.raises(CompileError, match="twice"):
        impl(8, block=8)


def test_output_with_a_dimension_no_input_binds():
    impl = tileauto.jit(out_idx=[0, 1], target="llvm")(kernels.dyn_double)
    with pytest.raises(KernelArgumentError, match="no input binds"):
        impl()


# -- symbolic shapes -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 5, 33])
def test_symbolic_shape_is_bound_from_the_input(n):
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.dyn_double)()
    assert k.params[0].shape == ("n", 4)
    a = torch.randn(n, 4)
    b = k(a)
    assert b.shape == (n, 4)
    torch.testing.assert_close(b, 2 * a)


def test_symbolic_shape_two_inputs(dyn_add):
    for n in (3, 100):
        a, b = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(dyn_add(a, b), a + b)


def test_size_variables_named_alike_are_bound_apart():
    k = tileauto.jit(out_idx=[2, 3], target="llvm")(kernels.two_sizes_named_n)()
    assert [p.shape for p in k.params] == [("n",), ("n_1",), ("n",), ("n_1 * 2",)]
    for n, m in ((5, 7), (9, 2)):
        a, b = torch.randn(n), torch.randn(m)
        s, t = k(a, b)
        torch.testing.assert_close(s, 2 * a)
        torch.testing.assert_close(t, b.repeat_interleave(2))
        s, t = k.prepare(a, b)()
        torch.testing.assert_close(t, b.repeat_interleave(2))


def test_one_of_two_size_variables_named_alike_given_inconsistently():
    k = tileauto.jit(out_idx=[2, 3], target="llvm")(kernels.two_sizes_named_n)()
    a, b = torch.randn(5), torch.randn(7)
    with pytest.raises(KernelArgumentError) as info:
        k(a, b, torch.empty(5), torch.empty(15))
    # the message names the parameter, and the variable by its name, with the sizes
    message = str(info.value)
    assert "'T'" in message and "['n * 2']" in message and "[15]" in message
    assert "n_1" not in message


def test_a_scalar_binds_its_own_size_variable_not_a_dimension_named_alike():
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.scalar_named_like_a_dim)()
    a = torch.randn(3)
    b = k(a, 6)
    torch.testing.assert_close(b, a[0] + torch.arange(6, dtype=torch.float32))
    with pytest.raises(KernelArgumentError, match=r"'B': dim 0 is n=5 but .* bound n=6"):
        k(a, 6, torch.empty(5))


@pytest.mark.parametrize(
    ("dtype", "bad", "low", "high"),
    [("int32", 2**32 + 7, -(2**31), 2**31 - 1), ("uint8", 300, 0, 255), ("int8", -200, -128, 127)],
)
def test_an_integer_scalar_its_dtype_cannot_hold_is_refused(dtype, bad, low, high):
    # TVM wrapped it silently (int32 2**32 + 7 ran as 7, uint8 300 as 44), which tuning refuses
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.add_scalar)(64, dtype)
    a = torch.zeros(64, dtype=getattr(torch, dtype))
    assert int(k(a, high)[0]) == high and int(k(a, low)[0]) == low
    message = rf"argument 1 \(parameter 'k': a scalar {dtype} holds {low} to {high}, got {bad}"
    for call in (lambda: k(a, bad), lambda: k(a, bad, torch.empty_like(a))):
        with pytest.raises(KernelArgumentError, match=message):
            call()
    with pytest.raises(KernelArgumentError, match=message):
        k.prepare(a, bad)
    with pytest.raises(KernelArgumentError, match=message):
        k(a, np.int64(bad))


def test_a_kernel_with_integer_scalars_keeps_the_c_call_slot(c_call_slot, monkeypatch):
    # the C slot range-checks the scalars itself: an in-range call never reaches the Python
    # method, an out-of-range one (or a value that is not an exact int) always does
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.add_scalar)(64, "int8")
    a = torch.zeros(64, dtype=torch.int8)
    assert k._fast_call is not None
    seen = []
    python_path = JITKernel._call_python
    monkeypatch.setattr(
        JITKernel, "_call_python", lambda self, *args: seen.append(args) or python_path(self, *args)
    )
    assert int(k(a, 127)[0]) == 127 and int(k(a, -128, torch.empty_like(a))[0]) == -128
    assert seen == []
    for bad in (128, -129, 2**70, -(2**70)):
        with pytest.raises(KernelArgumentError, match=rf"holds -128 to 127, got {bad}"):
            k(a, bad)
    with pytest.raises(KernelArgumentError, match="holds -128 to 127, got 300"):
        k(a, np.int16(300))
    assert int(k(a, np.int8(5))[0]) == 5  # not an exact int: the Python path, which takes it
    assert len(seen) == 6


@pytest.mark.parametrize("count", [3, 17])  # 17: more than the C slot holds (the Python path)
def test_every_integer_scalar_is_range_checked(count):
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.add_scalars)(count)
    a = torch.zeros(8, dtype=torch.int32)
    ones = [1] * count
    assert int(k(a, *ones)[0]) == count
    for j in (0, count - 1):
        args = list(ones)
        args[j] = 2**31
        with pytest.raises(KernelArgumentError, match=rf"parameter 'k{j}': a scalar int32 holds"):
            k(a, *args)
        with pytest.raises(KernelArgumentError, match=rf"parameter 'k{j}'"):
            k(a, *args, torch.empty_like(a))


def test_scalars_tvm_cannot_pass_are_named():
    # each was a raw TVM TypeError or torch's allocation error, naming no parameter
    jit = tileauto.jit(out_idx=[-1], target="llvm")
    k64 = jit(kernels.add_scalar)(8, "uint64")
    x64 = torch.zeros(8, dtype=torch.uint64)
    assert int(k64(x64, 2**63 - 1)[0]) == 2**63 - 1
    with pytest.raises(
        KernelArgumentError,
        match=r"'k': a scalar uint64 takes 0 to 9223372036854775807 here \(TVM passes it as an int64\), got 9223372036854775808",
    ):
        k64(x64, 2**63)
    scale = jit(kernels.scale_by)()
    torch.testing.assert_close(scale(torch.ones(8), 2**40), torch.full((8,), 2.0**40))
    with pytest.raises(
        KernelArgumentError,
        match=r"'s': a scalar float32 was given the int 2361183241434822606848, beyond int64 .*float\(value\)",
    ):
        scale(torch.ones(8), 2**71)
    length = jit(kernels.scalar_named_like_a_dim)()
    for call in (lambda: length(torch.ones(4), -1), lambda: length.prepare(torch.ones(4), -1)):
        with pytest.raises(
            KernelArgumentError, match=r"'n': a length \(a buffer's dimension\), got -1"
        ):
            call()
    keep = jit(kernels.keep_if)()
    a = torch.arange(8, dtype=torch.int32)
    assert keep(a, True).tolist() == a.tolist()
    with pytest.raises(
        KernelArgumentError,
        match=r"'flag': expected a scalar bool \(a Python bool\), got numpy.bool",
    ):
        keep(a, np.True_)


def test_a_length_by_value_that_disagrees_with_a_tensor_is_named():
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.length_by_value)()
    a = torch.randn(64)
    torch.testing.assert_close(k(a, 64), a * 2)
    with pytest.raises(KernelArgumentError, match=r"'n': the scalar n=32 but .* bound n=64"):
        k(a, 32)


def test_a_one_dimensional_empty_view_with_a_stride_runs():
    # batch[:, 0] of an empty (0, 3) batch: strides (3,), which TVM refused; jit.md: any
    # strides describe an empty tensor, so the call runs
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.script_add_one)()
    col = torch.empty(0, 3)[:, 0]
    assert col.stride() == (3,)
    assert k(col).shape == (0,)
    assert k(torch.empty(0)[::2], torch.empty(0)).shape == (0,)
    assert k.prepare(col)().shape == (0,)  # prepare as the call: TVM's check refused it
    assert k.prepare(torch.empty(0)[::2], torch.empty(0))().shape == (0,)


def test_an_output_extent_that_comes_out_negative_is_named():
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.script_drop_four)()
    torch.testing.assert_close(k(torch.arange(6.0)), torch.tensor([4.0, 5.0]))
    short = torch.arange(3.0)
    said = r"output 'B' of shape \['n - 4'\] would be \[-1\] for these inputs \(n=3\)"
    for call in (lambda: k(short), lambda: k.prepare(short)):
        with pytest.raises(KernelArgumentError, match=said):
            call()
    assert k(torch.arange(4.0)).shape == (0,)


def test_tvmscript_kernel_with_symbolic_shape():
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.script_add_one)()
    for n in (1, 17):
        a = torch.randn(n)
        torch.testing.assert_close(k(a), a + 1)


def test_tvmscript_kernel_in_an_ir_module():
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.script_matvec)()
    m, x = torch.randn(16, 16), torch.randn(16)
    torch.testing.assert_close(k(m, x), m @ x, rtol=1e-4, atol=1e-4)
    assert k.func_name == "_matvec_16"


# -- argument errors -------------------------------------------------------------------------------


def _bad_calls():
    ok = torch.randn(64)
    return {
        "too few": ((ok,), ["takes 2 input tensor(s)", "(A, B)", "got 1"]),
        "too many": (
            (ok, ok, ok, ok),
            ["takes 2 input tensor(s)", "got 4", "pass all 3 (A, B, C)"],
        ),
        "bad output": (
            (ok, ok, torch.randn(32)),
            ["argument 2", "'C'", "wrong shape", "expected a [64] float32", "got [32] float32"],
        ),
        "output of the wrong dtype": ((ok, ok, ok.double()), ["argument 2", "'C'", "wrong dtype"]),
        "shape": (
            (torch.randn(65), ok),
            ["'A'", "wrong shape", "expected a [64] float32", "got [65] float32"],
        ),
        "rank": (
            (ok, torch.randn(8, 8)),
            ["'B'", "number of dimensions", "expected a [64]", "got [8, 8]"],
        ),
        "dtype": (
            (ok.double(), ok),
            ["'A'", "wrong dtype", "expected a [64] float32", "got [64] float64"],
        ),
        "int dtype": ((ok, torch.ones(64, dtype=torch.int32)), ["'B'", "float32", "int32"]),
        "non-contiguous": ((torch.randn(128)[::2], ok), ["'A'", "not contiguous", "strides [2]"]),
        "non-tensor": ((ok, [0.0] * 64), ["'B'", "expected a [64] float32 tensor", "got list"]),
        # contiguous, but 4 bytes into its storage: TVM's code assumes 64-byte aligned data,
        # and its aligned vector loads killed the process
        "misaligned": ((torch.randn(65)[1:], ok), ["'A'", "not 64-byte aligned", "1 elements"]),
        "misaligned, too few": ((torch.randn(65)[1:],), ["takes 2 input tensor(s)", "got 1"]),
        "misaligned output": (
            (ok, ok, torch.empty(72)[8:]),
            ["argument 2", "'C'", "not 64-byte aligned", "8 elements"],
        ),
        "device": (
            (ok, torch.empty(64, device="meta")),
            ["'B'", "wrong device", "on cpu", "on meta"],
        ),
    }


BAD_CALLS = _bad_calls()


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_argument_errors_name_the_parameter(add64, case):
    args, fragments = BAD_CALLS[case]
    with pytest.raises(KernelArgumentError) as info:
        add64(*args)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert isinstance(info.value, ValueError)  # also catchable as a ValueError


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_prepare_checks_arguments_too(add64, case):
    args, _ = BAD_CALLS[case]
    with pytest.raises(KernelArgumentError):
        add64.prepare(*args)


@pytest.mark.parametrize("n", [16, 200_000])  # a small call (C's direct path) and a large one
def test_a_misaligned_view_is_refused_on_every_call_path(dyn_add, n):
    a, b = torch.randn(n), torch.randn(n + 1)[1:]
    with pytest.raises(KernelArgumentError, match="'B': its data is not 64-byte aligned"):
        dyn_add(a, b)
    with pytest.raises(KernelArgumentError, match="'B': its data is not 64-byte aligned"):
        dyn_add(a, b, torch.empty(n))
    torch.testing.assert_close(dyn_add(a, b.clone()), a + b)
    aligned = torch.randn(n + 16)[16:]  # 64 bytes in: as the kernel assumes
    torch.testing.assert_close(dyn_add(a, aligned), a + aligned)
    empty = torch.randn(2)[1:1]  # no element is loaded: nothing to refuse
    assert dyn_add(empty, empty).numel() == 0


@pytest.mark.parametrize("n", [16, 200_000])
def test_a_misaligned_numpy_array_is_refused_and_an_aligned_one_runs(dyn_add, n):
    # numpy aligns its arrays to 16 bytes: one at 4 bytes past 64 crashed the process
    buf = np.zeros(n + 32, dtype=np.float32)
    start = (-buf.ctypes.data % 64) // 4  # the first element 64-byte aligned
    aligned, misaligned = buf[start : start + n], buf[start + 1 : start + 1 + n]
    a = torch.randn(n)
    with pytest.raises(KernelArgumentError, match="'B': the ndarray's data is not 64-byte"):
        dyn_add(a, misaligned)
    with pytest.raises(KernelArgumentError, match="'B': the ndarray's data is not 64-byte"):
        dyn_add(a, misaligned, torch.empty(n))
    aligned[:] = np.arange(n, dtype=np.float32)
    torch.testing.assert_close(dyn_add(a, aligned), a + torch.from_numpy(aligned))


def test_inconsistent_symbolic_dims_between_inputs(dyn_add):
    with pytest.raises(KernelArgumentError) as info:
        dyn_add(torch.randn(7), torch.randn(8))
    message = str(info.value)
    assert "'B'" in message and "n=8" in message and "n=7" in message


def test_inconsistent_symbolic_dims_in_prepare(dyn_add):
    with pytest.raises(KernelArgumentError, match="'B'"):
        dyn_add.prepare(torch.randn(7), torch.randn(8))


def test_an_argument_error_leaves_the_kernel_usable(add64):
    with pytest.raises(KernelArgumentError):
        add64(torch.randn(3), torch.randn(3))
    a = torch.randn(64)
    torch.testing.assert_close(add64(a, a), 2 * a)


# -- destination passing ---------------------------------------------------------------------------


def test_every_parameter_given_writes_into_the_outputs(add64):
    a, b, c = torch.randn(64), torch.randn(64), torch.full((64,), float("nan"))
    assert add64(a, b, c) is c  # the given output, written in place and returned
    torch.testing.assert_close(c, a + b)
    add64(b, b, c)
    torch.testing.assert_close(c, 2 * b)


def test_destination_passing_with_several_outputs_in_parameter_order():
    k = tileauto.jit(out_idx=[2, 1], target="llvm")(kernels.scale_shift)(2, 3)
    a, b, c = torch.randn(2, 3), torch.empty(2, 3), torch.empty(2, 3)
    got = k(a, b, c)
    assert isinstance(got, tuple) and got[0] is b and got[1] is c
    torch.testing.assert_close(b, 2 * a)
    torch.testing.assert_close(c, a + 1)


def test_destination_passing_with_symbolic_shapes(dyn_add):
    a, b, c = torch.randn(11), torch.randn(11), torch.empty(11)
    assert dyn_add(a, b, c) is c
    torch.testing.assert_close(c, a + b)
    with pytest.raises(KernelArgumentError, match="'C'"):
        dyn_add(a, b, torch.empty(12))


def test_prepare_with_the_outputs_given(add64):
    a, b, c = torch.randn(64), torch.randn(64), torch.empty(64)
    call = add64.prepare(a, b, c)
    assert call() is c
    torch.testing.assert_close(c, a + b)
    with pytest.raises(KernelArgumentError, match="'C'"):
        add64.prepare(a, b, torch.empty(8))


# -- outputs shaped like an input ------------------------------------------------------------------


def test_symbolic_output_shaped_like_its_input_is_contiguous_and_fresh():
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.dyn_double)()
    base = torch.randn(8)
    # contiguous, but with an odd stride on the size-1 dim, which empty_like would copy
    a = base.as_strided((1, 4), (100, 1))
    assert a.is_contiguous()
    b = k(a)
    assert b.is_contiguous() and b.stride() == (4, 1)
    torch.testing.assert_close(b, 2 * a)
    assert k(a) is not b


def test_output_shaped_like_a_non_tensor_input_is_an_argument_error(dyn_add):
    with pytest.raises(KernelArgumentError, match="'A'.*got list"):
        dyn_add([1.0, 2.0], torch.randn(2))


@pytest.fixture
def no_python_allocation(monkeypatch):
    """The native helper's caller is there, and JITKernel may not allocate from Python."""
    from tileauto import _native
    from tileauto.jit import _call_plan as call_plan
    from tileauto.jit import kernel as kernel_mod

    if _native.output_caller() is None:
        pytest.skip("the native helper (libtileauto_native) is not built in this checkout")

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel call allocated its output from Python")

    monkeypatch.setattr(kernel_mod, "_empty_like", refuse)
    monkeypatch.setattr(call_plan, "_empty_like", refuse)


def test_a_static_output_is_allocated_in_cpp_fresh_each_call(add64, no_python_allocation):
    """With the native helper, k(a, b) allocates its output in C++: no torch call from Python."""
    a, b = torch.randn(64), torch.randn(64)
    first, second = add64(a, b), add64(a, b)
    assert isinstance(first, torch.Tensor) and first.shape == (64,) and first.is_contiguous()
    assert first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(first, a + b)
    with pytest.raises(KernelArgumentError, match="'A'"):
        add64(torch.randn(8), b)


def test_an_output_shaped_like_an_input_is_allocated_in_cpp_too(dyn_add, no_python_allocation):
    for size in (5, 33):
        a, b = torch.randn(size), torch.randn(size)
        out = dyn_add(a, b)
        assert out.shape == (size,) and out.is_contiguous()
        torch.testing.assert_close(out, a + b)


def test_inputs_that_bring_no_allocator_still_get_a_torch_output(add64):
    """numpy inputs (no torch allocator for the native caller): the output comes from Python."""
    a, b = torch.randn(64), torch.randn(64)
    out = add64(a.numpy(), b.numpy())
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, a + b)


@pytest.fixture
def c_call_slot():
    """JITKernel's call slot is C (src/kernel_call.c): the extension module is built."""
    from tileauto._native import kernel_call_base

    base = kernel_call_base()
    if base is None:
        if os.environ.get("TILEAUTO_ALLOW_MISSING_NATIVE") == "1":
            pytest.skip("tileauto._kernel_call is not built (TILEAUTO_ALLOW_MISSING_NATIVE=1)")
        pytest.fail("tileauto._kernel_call is missing after install: rebuild with pip install -e .")
    assert JITKernel.__mro__[1] is base
    assert "__call__" not in JITKernel.__dict__  # the slot is the base's, not a Python method
    return base


def _add(n: int) -> JITKernel:
    """A fresh ``C = A + B`` kernel on ``n`` float32 (a test may change its call paths)."""
    return tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(n)


def test_the_c_call_slot_runs_the_native_caller_without_python(
    c_call_slot, no_python_allocation, monkeypatch
):
    """Without the direct call, k(a, b) with torch tensors goes from the C call slot to the
    native output caller, and k(a, b, out) to the kernel: the Python call path is never
    entered. Anything else (numpy inputs, a wrong count, keywords) is the Python path's."""
    add64 = _add(64)
    add64._set_direct_call(None)
    assert not add64._direct_call
    assert add64._fast_call is add64._native_out is not None
    entered = []

    def python_path(self, *args, **kwargs):
        entered.append(len(args) + len(kwargs))
        return "python"

    monkeypatch.setattr(JITKernel, "_call_python", python_path)
    a, b, out = torch.randn(64), torch.randn(64), torch.full((64,), float("nan"))
    torch.testing.assert_close(add64(a, b), a + b)
    assert add64(a, b, out) is out
    torch.testing.assert_close(out, a + b)
    assert entered == []
    assert add64(a.numpy(), b.numpy()) == "python"  # no allocator: the caller ran nothing
    assert add64(a) == "python"
    assert add64(a, b=b) == "python"
    assert entered == [2, 1, 2]


def test_the_c_call_slot_names_a_bad_argument_or_raises_the_kernels_error(
    add64, c_call_slot, monkeypatch
):
    """The kernel's own check rejects an argument in the fast path: the KernelArgumentError
    that names it; where tileauto finds nothing wrong, the kernel's error itself."""
    b = torch.randn(64)
    with pytest.raises(KernelArgumentError, match="argument 0 .*'A'") as info:
        add64(torch.randn(8), b)
    assert isinstance(info.value.__cause__, ValueError)  # TVM's check, kept as the cause
    with pytest.raises(KernelArgumentError, match="argument 2 .*'C'"):
        add64(b, b, torch.empty(8))  # destination passing: the kernel called from C too
    monkeypatch.setattr(JITKernel, "_raise_argument_error", lambda self, args, cause: None)
    with pytest.raises(ValueError, match="shape") as info:
        add64(torch.randn(8), b)
    assert not isinstance(info.value, KernelArgumentError)


def _spy_paths(kernel: JITKernel, monkeypatch) -> list[str]:
    """Replace every path of the C call slot but the direct call with one that records its
    use: the native output caller and destination passing (which then run nothing) and the
    Python path (which returns "python")."""
    from tileauto.jit.kernel import _ARGUMENT_ERRORS

    used: list[str] = []

    def fast(*args):
        used.append("fast")  # None: "nothing ran", so the Python path follows

    def dest(*args):
        used.append("dest")

    def python_path(self, *args, **kwargs):
        used.append("python")
        return "python"

    kernel._set_fast_call(fast, kernel._num_in, _ARGUMENT_ERRORS)
    kernel._set_dest_call(dest, kernel._num_params, kernel._single_out)
    monkeypatch.setattr(JITKernel, "_call_python", python_path)
    return used


def test_small_cpu_calls_with_torch_tensors_take_the_direct_call(c_call_slot, monkeypatch):
    """The direct call (torch tensors as DLTensor views, src/kernel_call.c) serves k(a, b) and
    k(a, b, out) on CPU torch tensors; a tensor subclass takes the other paths."""
    add64 = _add(64)
    assert add64._direct_call
    used = _spy_paths(add64, monkeypatch)
    a, b, out = torch.randn(64), torch.randn(64), torch.full((64,), float("nan"))
    first, second = add64(a, b), add64(a, b)
    torch.testing.assert_close(first, a + b)
    assert first.data_ptr() != second.data_ptr() and first.is_contiguous()
    assert add64(a, b, out) is out
    torch.testing.assert_close(out, a + b)
    assert used == []
    param = torch.nn.Parameter(a.clone())
    assert add64(param, b) == "python"
    assert used == ["fast", "python"]


def test_the_direct_call_is_for_small_calls_only(c_call_slot, monkeypatch):
    """At most 256 KiB of tensors per call (the direct call keeps the GIL while the kernel
    runs); a larger call takes tvm-ffi's call, which releases it."""
    small, large = _add(16384), _add(32768)  # 3 x 64 KiB, 3 x 128 KiB
    used_small = _spy_paths(small, monkeypatch)
    a, b = torch.randn(16384), torch.randn(16384)
    torch.testing.assert_close(small(a, b), a + b)
    assert used_small == []
    used_large = _spy_paths(large, monkeypatch)
    a, b = torch.randn(32768), torch.randn(32768)
    assert large(a, b) == "python"
    assert large(a, b, torch.empty(32768)) is not None
    assert used_large == ["fast", "python", "dest"]


def test_the_direct_call_names_a_bad_argument(c_call_slot):
    """The kernel's own checks reject the argument before it runs; the error names it, as on
    every other path, and the FFI error's class is the cause."""
    add64 = _add(64)
    assert add64._direct_call
    b = torch.randn(64)
    with pytest.raises(KernelArgumentError, match="argument 0 .*'A'.*not contiguous"):
        add64(torch.randn(128)[::2], b)
    with pytest.raises(KernelArgumentError, match="argument 1 .*'B'.*float64") as info:
        add64(b, b.double())
    assert isinstance(info.value.__cause__, TypeError | ValueError)
    with pytest.raises(KernelArgumentError, match="argument 2 .*'C'"):
        add64(b, b, torch.empty(64, dtype=torch.float64))


def test_the_direct_call_from_several_threads(c_call_slot):
    import threading

    add64 = _add(64)
    wrong: list[int] = []

    def work(seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        a, b = torch.randn(64, generator=gen), torch.randn(64, generator=gen)
        out = torch.empty(64)
        for _ in range(2000):
            if not torch.equal(add64(a, b), a + b) or not torch.equal(add64(a, b, out), a + b):
                wrong.append(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_a_kernel_with_a_c_call_slot_is_collected(c_call_slot):
    import gc
    import weakref

    kernel = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(64)
    kernel._self = kernel  # a cycle through the instance's dict
    ref = weakref.ref(kernel)
    del kernel
    gc.collect()
    assert ref() is None


# -- prepare ---------------------------------------------------------------------------------------


def test_prepare_gives_the_same_results(add64):
    a, b = torch.randn(64), torch.randn(64)
    call = add64.prepare(a, b)
    out = call()
    torch.testing.assert_close(out, add64(a, b))
    assert call() is out  # the same output tensor, overwritten in place
    a.copy_(torch.ones(64))
    b.copy_(torch.ones(64))
    torch.testing.assert_close(call(), torch.full((64,), 2.0))


def test_prepare_with_symbolic_shapes_and_several_outputs(dyn_add):
    a, b = torch.randn(9), torch.randn(9)
    torch.testing.assert_close(dyn_add.prepare(a, b)(), a + b)
    k = tileauto.jit(out_idx=[1, 2], target="llvm")(kernels.scale_shift)(2, 3)
    x = torch.randn(2, 3)
    b2, c2 = k.prepare(x)()
    torch.testing.assert_close(b2, 2 * x)
    torch.testing.assert_close(c2, x + 1)


def test_prepare_count_error(add64):
    with pytest.raises(KernelArgumentError, match="got 1"):
        add64.prepare(torch.randn(64))


# -- sources, export, reload -----------------------------------------------------------------------


def test_sources_are_available(add64):
    kernel_source = add64.get_kernel_source()
    host_source = add64.get_host_source()
    script = add64.get_script()
    assert kernel_source.strip() and host_source.strip() and script.strip()
    assert "define" in kernel_source  # LLVM IR on a CPU target
    assert "def main" in script and "T.Buffer" in script
    assert callable(add64.get_function())


def test_raw_function_is_destination_passing(add64):
    a, b, c = torch.randn(64), torch.randn(64), torch.empty(64)
    add64.get_function()(a, b, c)
    torch.testing.assert_close(c, a + b)


def test_export_and_load_in_this_process(add64, tmp_path):
    path = add64.export_library(tmp_path / "sub" / "add.so")
    assert path == tmp_path / "sub" / "add.so" and path.is_file()
    meta = json.loads(Path(f"{path}.json").read_text())
    assert meta["func_name"] == "main" and "directory" not in meta
    loaded = JITKernel.load_library(path)
    a, b = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(loaded(a, b), a + b)
    assert loaded.config == add64.config
    assert str(loaded.target) == str(add64.target)


def test_load_library_without_its_description(add64, tmp_path):
    path = add64.export_library(tmp_path / "add.so")
    Path(f"{path}.json").unlink()
    with pytest.raises(FileNotFoundError, match="export_library"):
        JITKernel.load_library(path)


def test_load_library_of_a_cache_entrys_kernel_says_what_it_is(add64):
    with pytest.raises(FileNotFoundError, match="a cache entry's kernel folder .* kernel.json"):
        JITKernel.load_library(add64.artifact.lib_path)  # kernels/<key>/kernel/kernel.so


def _row_parallel_scale() -> tvm.tirx.PrimFunc:
    import tvm.s_tir as st
    from tvm import te

    A = te.placeholder((64, 256), "float32", name="A")
    B = te.compute((64, 256), lambda i, j: A[i, j] * 2.0, name="B")
    sch = st.Schedule(te.create_prim_func([A, B]))
    sch.parallel(sch.get_loops(sch.get_sblock("B"))[0])
    return sch.mod["main"]


def test_a_parallel_kernel_exported_under_another_name_keeps_its_thread_pool(tmp_path):
    # load_library looked for the pool's calls in kernel.so beside the file it loaded: a
    # library exported under any other name lost tileauto's pool (use_threads changed nothing)
    kernel = tileauto.jit(out_idx=[-1], target="llvm")(_row_parallel_scale)()
    assert kernel.thread_pool == "tileauto"
    loaded = JITKernel.load_library(kernel.export_library(tmp_path / "scale.so"))
    assert loaded.thread_pool == "tileauto"
    a = torch.randn(64, 256)
    assert torch.equal(loaded(a), a * 2)


def _plus(n: int = 64, c: float = 1.0) -> tvm.tirx.PrimFunc:
    from tvm import te

    A = te.placeholder((n,), "float32", name="A")
    return te.create_prim_func([A, te.compute((n,), lambda i: A[i] + c, name="B")])


def test_a_loaded_kernel_exports_the_library_it_runs(tmp_path):
    # export_library copied kernel.so beside the file load_library had read: another kernel's
    # code under this one's description, or a FileNotFoundError naming a file nobody gave
    plus = tileauto.jit(out_idx=[-1], target="llvm")(_plus)
    plus(64, 1.0).export_library(tmp_path / "kernel.so")
    loaded = JITKernel.load_library(plus(64, 100.0).export_library(tmp_path / "plus100.so"))
    shipped = JITKernel.load_library(loaded.export_library(tmp_path / "out" / "shipped.so"))
    assert shipped(torch.zeros(64))[0].item() == 100.0
    again = JITKernel.load_library(loaded.export_library(tmp_path / "plus100.so"))  # in place
    assert again(torch.zeros(64))[0].item() == 100.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kernel.so",
        "kernel.so.json",
        "out",
        "plus100.so",
        "plus100.so.json",
    ]  # no temporary file left


def test_exporting_over_a_loaded_library_leaves_the_loaded_kernel_running(tmp_path):
    # export_library wrote over the file in place: a process that had it loaded (a server)
    # was killed by SIGSEGV at its next call. It runs in a child, which that would kill.
    script = textwrap.dedent(
        f"""
        import json, sys, torch
        sys.path.insert(0, {str(HERE)!r})
        import tileauto
        from tileauto import JITKernel
        from test_jit import _plus

        plus = tileauto.jit(out_idx=[-1], target="llvm")(_plus)
        path = plus(4096, 1.0).export_library({str(tmp_path / "k.so")!r})
        served = JITKernel.load_library(path)
        plus(256, 2.0).export_library(path)  # a new version shipped to the same path
        x = torch.randn(4096)
        assert torch.equal(served(x), x + 1)
        meta = json.load(open(str(path) + ".json"))
        assert meta["params"][0]["shape"] == [256]  # the new version's description
        print("OK")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-2000:]


def test_export_and_load_in_a_fresh_process(dyn_add, tmp_path):
    path = dyn_add.export_library(tmp_path / "dyn_add.so")
    script = textwrap.dedent(
        f"""
        import torch
        from tileauto import JITKernel

        k = JITKernel.load_library({str(path)!r})
        a, b = torch.arange(5.0), torch.ones(5)
        out = k(a, b)
        assert out.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0], out
        try:
            k(torch.ones(2), torch.ones(3))
        except Exception as exc:
            print(type(exc).__name__)
        print("OK", k.func_name, k.target.kind.name)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["KernelArgumentError", "OK", "main", "llvm"]


# -- targets ---------------------------------------------------------------------------------------


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(target_mod, "cuda_usable", lambda: False)


@pytest.mark.parametrize("target", ["auto", None, " auto "])
def test_auto_on_a_cpu_machine_is_the_host_cpu(no_gpu, target):
    t = resolve_target(target)
    assert t.kind.name == "llvm"
    assert t.attrs["mcpu"] == codegen.llvm_get_system_cpu()
    assert "mtriple" in t.attrs


@pytest.mark.parametrize("target", ["llvm", "cpu"])
def test_llvm_means_the_host_cpu_with_its_features(target):
    t = resolve_target(target)
    assert t.kind.name == "llvm"
    assert t.attrs["mcpu"] == codegen.llvm_get_system_cpu()


def test_dict_and_json_targets():
    generic = resolve_target({"kind": "llvm"})
    assert generic.kind.name == "llvm" and "mcpu" not in generic.attrs
    t = resolve_target({"kind": "llvm", "mcpu": "generic"})
    assert t.attrs["mcpu"] == "generic"
    assert str(resolve_target(json.dumps({"kind": "llvm", "mcpu": "generic"}))) == str(t)


def test_target_object_is_used_as_is():
    t = Target({"kind": "llvm", "mcpu": "generic"})
    assert resolve_target(t) is t


@pytest.mark.parametrize(
    "bad", ["not-a-target", "llvm -mcpu=skylake", {"kind": "nope"}, '{"kind": "llvm"']
)
def test_bad_target_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError) as info:
        resolve_target(bad)
    assert f"target={bad!r}" in str(info.value)


@pytest.mark.parametrize("bad", [42, 1.5, ["llvm"]])
def test_target_of_the_wrong_type(bad):
    with pytest.raises(ValueError, match=f"got {type(bad).__name__}"):
        resolve_target(bad)


def test_bad_target_in_jit_fails_at_compile():
    impl = tileauto.jit(out_idx=[-1], target="not-a-target")(kernels.vector_add)
    with pytest.raises(ValueError, match="target='not-a-target'"):
        impl(8, block=8)


def test_default_target_variable_is_honoured(monkeypatch, no_gpu):
    monkeypatch.setenv("TILEAUTO_DEFAULT_TARGET", json.dumps({"kind": "llvm", "mcpu": "generic"}))
    assert resolve_target("auto").attrs["mcpu"] == "generic"
    assert resolve_target(None).attrs["mcpu"] == "generic"
    assert resolve_target("llvm").attrs["mcpu"] == codegen.llvm_get_system_cpu()  # explicit wins
    k = tileauto.jit(out_idx=[-1])(kernels.vector_add)(8, block=8)
    assert k.target.attrs["mcpu"] == "generic"
    a = torch.randn(8)
    torch.testing.assert_close(k(a, a), 2 * a)


def test_default_target_llvm(monkeypatch):
    monkeypatch.setenv("TILEAUTO_DEFAULT_TARGET", "llvm")
    assert resolve_target("auto").attrs["mcpu"] == codegen.llvm_get_system_cpu()


def test_bad_default_target_names_the_variable(monkeypatch):
    """The error said ``target='warp-drive'`` where the call said target="auto": the
    variable was never named."""
    from tileauto.errors import SettingsError

    monkeypatch.setenv("TILEAUTO_DEFAULT_TARGET", "warp-drive")
    with pytest.raises(SettingsError, match=r"TILEAUTO_DEFAULT_TARGET='warp-drive' .*is not a"):
        resolve_target("auto")
    monkeypatch.setenv("TILEAUTO_DEFAULT_TARGET", "AUTO")  # any case, as the call's "auto"
    assert str(resolve_target("auto")) == str(resolve_target(None))  # a CUDA one is new each time


def test_cuda_targets_get_a_host():
    t = resolve_target(CUDA_SM90)
    assert t.kind.name == "cuda" and t.attrs["arch"] == "sm_90"
    assert t.host is not None and t.host.kind.name == "llvm"
    assert device_type_of(t) == "cuda"
    generic_host = resolve_target(CUDA_SM90, target_host={"kind": "llvm"})
    assert "mcpu" not in generic_host.host.attrs
    assert resolve_target("cuda").kind.name == "cuda"


def test_target_json_round_trips():
    t = resolve_target("llvm")
    text = target_json(t)
    assert json.loads(text)["kind"] == "llvm"
    assert target_json(Target(text)) == text
    assert device_type_of(t) == "cpu"


# -- CompileArgs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "out_idx, expected", [(None, None), (-1, (-1,)), ([0, 2], (0, 2)), ((1,), (1,)), ([], ())]
)
def test_compile_args_normalize_out_idx(out_idx, expected):
    assert CompileArgs(out_idx=out_idx).out_idx == expected


@pytest.mark.parametrize("out_idx", ["-1", True, 1.0, [1.0], [True], [0, "1"], {"a": 1}])
def test_compile_args_reject_bad_out_idx(out_idx):
    with pytest.raises(TypeError, match="out_idx"):
        CompileArgs(out_idx=out_idx)
    with pytest.raises(TypeError, match="out_idx"):
        tileauto.jit(out_idx=out_idx)


@pytest.mark.parametrize("backend", ["cython", "ctypes", "", "TVM_FFI"])
def test_compile_args_reject_bad_execution_backend(backend):
    with pytest.raises(ValueError, match="execution_backend"):
        CompileArgs(execution_backend=backend)
    with pytest.raises(ValueError, match="execution_backend"):
        tileauto.jit(execution_backend=backend)


def test_compile_args_accept_known_backends():
    assert CompileArgs(execution_backend="tvm_ffi").execution_backend == "tvm_ffi"


def test_compile_args_reject_bad_pass_configs():
    with pytest.raises(TypeError, match="pass_configs"):
        CompileArgs(pass_configs=[("tirx.disable_vectorize", True)])


def test_pass_configs_reach_the_compiler():
    impl = tileauto.jit(out_idx=[-1], target="llvm", pass_configs={"tirx.disable_vectorize": True})(
        kernels.vector_add
    )
    k = impl(64)
    a = torch.randn(64)
    torch.testing.assert_close(k(a, a), 2 * a)
    with pytest.raises(CompileError):
        tileauto.jit(out_idx=[-1], target="llvm", pass_configs={"no.such.option": 1})(
            kernels.vector_add
        )(64)


def test_with_compile_args_copies():
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    other = impl.with_compile_args(out_idx=None)
    assert other is not impl and other.compile_args.out_idx is None
    assert impl.compile_args.out_idx == (-1,)


# -- factories that fail ---------------------------------------------------------------------------


def test_factory_returning_something_else_is_a_compile_error():
    with pytest.raises(CompileError, match="must return a tvm PrimFunc or IRModule, got int"):
        tileauto.jit(kernels.not_a_kernel)(3)


def test_factory_raising_is_a_compile_error():
    with pytest.raises(CompileError, match="RuntimeError: factory refuses n=3"):
        tileauto.jit(kernels.always_fails)(3)


def test_a_bare_assert_of_the_factory_says_where_it_failed():
    # `AssertionError:` and nothing else, the same for every assert of the factory
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.asserts)
    with pytest.raises(CompileError) as first:
        impl(64, block=7)
    with pytest.raises(CompileError) as second:
        impl(64, block=64)
    line = kernels.asserts.__code__.co_firstlineno
    assert str(first.value) == (
        f"AssertionError (raised at kernels.py:{line + 2}: assert n % block == 0)"
    )
    assert (
        str(second.value) == f"AssertionError (raised at kernels.py:{line + 3}: assert block <= 32)"
    )
    # a message of the user's is kept, with the place; TVM's own errors are as they were
    with pytest.raises(
        CompileError, match=r"^RuntimeError: factory refuses n=3 \(raised at kernels.py:\d+\)$"
    ):
        tileauto.jit(kernels.always_fails)(3)


def test_schedule_error_is_a_compile_error():
    with pytest.raises(CompileError, match="ScheduleError"):
        tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(64, block=0)


def test_failed_compile_is_not_cached(no_disk_cache):
    impl = tileauto.jit(kernels.not_a_kernel)
    for _ in range(2):
        with pytest.raises(CompileError):
            impl(3)
    assert impl.compile_count == 2


# -- par_compile -----------------------------------------------------------------------------------

PAR_CONFIGS = [{"block": 8}, {"block": 0}, {"block": 32}]


def _check_par_results(results):
    assert len(results) == 3
    ok0, bad, ok2 = results
    assert isinstance(ok0, JITKernel) and isinstance(ok2, JITKernel)
    assert ok0.config["block"] == 8 and ok2.config["block"] == 32
    assert isinstance(bad, CompileFailure)
    assert not bad and ok0 and ok2
    assert [k for k in results if k] == [ok0, ok2]
    assert bad.index == 1 and bad.config == {"block": 0, "n": 64}
    assert bad.status is BuildStatus.ERROR
    assert "split" in bad.error
    assert "'block': 0" in str(bad) and "compile_error" in str(bad)
    a, b = torch.randn(64), torch.randn(64)
    for k in (ok0, ok2):
        torch.testing.assert_close(k(a, b), a + b)


def test_par_compile_with_process_isolation():
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    results = impl.par_compile([dict(c, n=64) for c in PAR_CONFIGS], num_workers=2)
    _check_par_results(results)


def test_par_compile_with_thread_isolation(monkeypatch):
    monkeypatch.setenv("TILEAUTO_COMPILE_ISOLATION", "thread")
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    results = impl.par_compile([dict(c, n=64) for c in PAR_CONFIGS], num_workers=2)
    _check_par_results(results)


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_par_compile_positional_configs_and_factory_errors(monkeypatch, isolation):
    monkeypatch.setenv("TILEAUTO_COMPILE_ISOLATION", isolation)
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    ok, fails = impl.par_compile([(16, 8), (16, 8, "float32", "extra")], num_workers=1)
    assert isinstance(ok, JITKernel) and ok.params[0].shape == (16,)
    assert isinstance(fails, CompileFailure) and fails.config == (16, 8, "float32", "extra")
    assert "argument" in fails.error  # TypeError: too many positional arguments


def test_par_compile_kernels_are_the_calls_kernels(no_disk_cache):
    """A later call with the same arguments returns the par_compile kernel, compiling nothing;
    a config given twice, or already called, is compiled once."""
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    first = impl(64, block=4)
    k8, k8_again, k4, k32 = impl.par_compile(
        [{"n": 64, "block": 8}, (64, 8), {"n": 64, "block": 4}, {"n": 64, "block": 32}],
        num_workers=2,
    )
    assert impl.compile_count == 3  # the call, then blocks 8 and 32
    assert k8 is k8_again and k4 is first
    assert impl(64, block=8) is k8 and impl(n=64, block=32) is k32
    assert impl.compile_count == 3
    assert k8.config == impl(64, block=8).config == {"block": 8, "dtype": "float32"}
    a, b = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(k32(a, b), a + b)


def test_par_compile_fills_and_reads_the_disk_cache():
    """Another process (a fresh JITImpl here) loads what par_compile compiled, and par_compile
    loads what a call compiled."""
    configs = [{"n": 64, "block": 8}, {"n": 64, "block": 32}]
    first = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    first.par_compile(configs, num_workers=2)
    first(64, block=4)
    assert first.compile_count == 3

    second = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    assert second(64, block=8).config == {"block": 8, "dtype": "float32"}
    kernels_ = second.par_compile(configs + [{"n": 64, "block": 4}], num_workers=2)
    assert second.compile_count == 0
    assert [k.config["block"] for k in kernels_] == [8, 32, 4]
    a, b = torch.randn(64), torch.randn(64)
    for k in kernels_:
        torch.testing.assert_close(k(a, b), a + b)


def test_par_compile_takes_numpy_scalars_as_a_call_does():
    """``np.int64(4096)`` is 4096 in a config too: it compiles, under the call's key (a later
    call with Python ints, here or in another process, finds it)."""
    configs = [{"n": np.int64(64), "block": np.int64(16)}, (np.int32(64), np.int32(32))]
    first = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    k16, k32 = first.par_compile(configs, num_workers=2)
    assert isinstance(k16, JITKernel) and isinstance(k32, JITKernel), (k16, k32)
    assert first(64, 16) is k16 and first(64, block=32) is k32 and first.compile_count == 2
    second = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    assert second(64, 16).config["block"] == 16 and second.compile_count == 0


def test_par_compile_reports_a_kernel_that_cannot_be_called_as_its_configs_failure():
    """A compile whose kernel no call can use (an output extent no input binds) fails its own
    config, is not stored, and the other configs' kernels come back."""
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.unbound_output)
    good, bad = impl.par_compile([{"n": 8}, {"n": 8, "unbound": True}], num_workers=2)
    assert isinstance(good, JITKernel)
    assert isinstance(bad, CompileFailure) and bad.config == {"n": 8, "unbound": True}
    assert "cannot be called" in bad.error and "'m'" in bad.error
    torch.testing.assert_close(good(torch.ones(8)), torch.full((8,), 2.0))
    again = tileauto.jit(out_idx=[-1], target="llvm")(kernels.unbound_output)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no stored entry that "does not load"
        (failed,) = again.par_compile([{"n": 8, "unbound": True}], num_workers=1)
    assert isinstance(failed, CompileFailure) and again.compile_count == 1


def test_a_factory_given_as_a_partial_is_named_by_its_function():
    import functools

    impl = tileauto.jit(functools.partial(kernels.vector_add, 64), out_idx=[-1], target="llvm")
    assert impl.__name__ == "vector_add"
    assert impl.with_compile_args(verbose=True)(block=8).config["block"] == 8


_BUILDS_ELSEWHERE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import kernels, tileauto
    from tileauto.cache.args import bind_arguments
    from tileauto.jit.compiler import compile_to_dir
    from tileauto.jit.impl import _tunables
    from tileauto.settings import Settings

    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    call = {"n": 64, "block": 8}
    bound = bind_arguments(impl.factory, (), call)
    store = impl._store(Settings.from_env(), bound)
    with store.locked() as held:  # as a process building this kernel holds it
        print("locked", held, flush=True)
        sys.stdin.readline()  # until the test's par_compile has started
        out = Path(sys.argv[2]) / "k"
        artifact = compile_to_dir(impl.factory, (), call, impl.compile_args, out,
                                  config=_tunables(impl.factory, bound))
        store.save(artifact)
    print("stored", flush=True)
    """
)


def test_par_compile_waits_for_a_kernel_another_process_is_building(tmp_path):
    """Another process holds the lock of one config (it is building that kernel): par_compile
    builds the other config, waits for that one and loads it, compiling it not a second time.
    Whenever the other process gets to store it (before par_compile looks or after), the
    outcome is the same."""
    import threading

    other = subprocess.Popen(
        [sys.executable, "-c", _BUILDS_ELSEWHERE, str(HERE), str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ),
    )  # fmt: skip
    try:
        assert other.stdout.readline().split() == ["locked", "True"]
        impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
        results: list = []
        worker = threading.Thread(
            target=lambda: results.extend(
                impl.par_compile([{"n": 64, "block": 8}, {"n": 64, "block": 4}], num_workers=1)
            )
        )
        worker.start()
        other.stdin.write("go\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "stored"
        worker.join()
        assert other.wait() == 0
    finally:
        if other.poll() is None:
            other.kill()
    k8, k4 = results
    assert impl.compile_count == 1  # block 4 here; block 8 by the other process
    assert k8.config == {"block": 8, "dtype": "float32"} and impl(64, block=8) is k8
    a, b = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(k8(a, b), a + b)
    torch.testing.assert_close(k4(a, b), a + b)


def test_an_interrupted_par_compile_keeps_the_kernels_it_built():
    """Ctrl-C while one config still compiles: the kernel finished before it is in the disk
    cache (it was stored only once every config was done), and loads without a compile."""
    import signal
    import threading
    import time

    from tileauto.cache.args import bind_arguments
    from tileauto.settings import Settings

    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.slow_vector_add)
    quick, held = {"n": 64, "block": 8}, {"n": 64, "block": 4, "sleep_s": 3600.0}
    store = impl._store(Settings.from_env(), bind_arguments(impl.factory, (), quick))
    stored_in_time: list[bool] = []

    def interrupt_once_stored() -> None:
        deadline = time.monotonic() + 120.0  # only a guard: the store comes in seconds
        while store.load() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling for the entry, the condition itself
        stored_in_time.append(store.load() is not None)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    helper = threading.Thread(target=interrupt_once_stored, daemon=True)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        impl.par_compile([quick, held], num_workers=2)
    helper.join()
    assert stored_in_time == [True], "the finished kernel was not stored before the interrupt"
    again = tileauto.jit(out_idx=[-1], target="llvm")(kernels.slow_vector_add)
    (kernel,) = again.par_compile([quick], num_workers=1)
    assert again.compile_count == 0 and isinstance(kernel, JITKernel)
    a, b = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(kernel(a, b), a + b)


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_a_factory_that_exits_fails_its_config_only(monkeypatch, isolation):
    """``sys.exit`` or a bare ``KeyboardInterrupt`` from the factory, or an exception without
    a message: each fails its own config, named by its type (an empty message made the build
    itself raise IndexError and lose every config). In a thread, a KeyboardInterrupt is taken
    for Ctrl-C and ends the build."""
    monkeypatch.setenv("TILEAUTO_COMPILE_ISOLATION", isolation)
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.leaving_vector_add)
    hows = ["", "exit", "blank"] + (["interrupt"] if isolation == "process" else [])
    results = impl.par_compile([{"n": 64, "how": how} for how in hows], num_workers=1)
    assert isinstance(results[0], JITKernel)
    errors = [r.error for r in results[1:]]
    assert all(isinstance(r, CompileFailure) for r in results[1:])
    assert errors[0] == "SystemExit: 3", errors
    assert "RuntimeError" in errors[1], errors
    if isolation == "process":
        assert errors[2] == "KeyboardInterrupt"


def test_par_compile_of_a_non_kernel_factory():
    impl = tileauto.jit(kernels.not_a_kernel)
    (failure,) = impl.par_compile([{"n": 3}], num_workers=1)
    assert isinstance(failure, CompileFailure)
    assert "must return a tvm PrimFunc or IRModule" in failure.error


def test_par_compile_rejects_bad_config_entries():
    impl = tileauto.jit(kernels.vector_add)
    with pytest.raises(TypeError, match=r"configs\[0\]"):
        impl.par_compile([8])


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("num_workers", 0, "num_workers must be None .* or an int >= 1, got 0"),
        ("num_workers", 2.5, "num_workers must be None .* or an int >= 1, got 2.5"),
        ("num_workers", True, "num_workers must be None .* or an int >= 1, got True"),
        ("num_workers", 10**6, "num_workers=1000000: .* more than the .* CPUs"),
        ("timeout_s", -5, "timeout_s must be a positive number of seconds, .*got -5"),
        ("timeout_s", float("nan"), "timeout_s must be a positive number .* got nan"),
        ("timeout_s", float("inf"), "timeout_s must be a positive number .* at most 1000000"),
    ],
)
def test_par_compile_checks_its_options_before_compiling(option, value, said):
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    with pytest.raises(ValueError, match=said):
        impl.par_compile([{"n": 64, "block": 8}], **{option: value})
    assert impl.compile_count == 0


def test_par_compile_refuses_more_workers_by_the_settings_than_cpus(monkeypatch):
    from tileauto.errors import SettingsError
    from tileauto.machine import available_cpus

    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_CPU_COUNTS", str(available_cpus() + 1))
    impl = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)
    with pytest.raises(SettingsError, match="TILEAUTO_AUTO_TUNING_CPU_COUNTS=.* compile workers"):
        impl.par_compile([{"n": 64, "block": 8}, {"n": 64, "block": 4}])
    assert impl.compile_count == 0


def test_par_compile_empty():
    assert tileauto.jit(kernels.vector_add).par_compile([]) == []


def test_par_compile_honours_default_target_set_after_workers_started(monkeypatch, no_gpu):
    impl = tileauto.jit(out_idx=[-1])(kernels.vector_add)
    impl.par_compile([{"n": 8, "block": 8}], num_workers=1)  # the worker pool is running now
    monkeypatch.setenv("TILEAUTO_DEFAULT_TARGET", json.dumps({"kind": "llvm", "mcpu": "generic"}))
    (k,) = impl.par_compile([{"n": 8, "block": 4}], num_workers=1)
    assert k.target.attrs["mcpu"] == "generic"


# -- CUDA (no GPU needed to compile) ---------------------------------------------------------------


def test_cuda_compile_produces_cuda_source(tmp_path):
    artifact = compile_to_dir(
        kernels.cuda_double, (), {}, CompileArgs(out_idx=[-1], target=CUDA_SM90), tmp_path / "k"
    )
    assert artifact.device_type == "cuda"
    assert json.loads(artifact.target)["arch"] == "sm_90"
    source = (artifact.directory / artifact.KERNEL_SOURCE).read_text()
    assert "__global__" in source and "threadIdx.x" in source
    assert (artifact.directory / artifact.HOST_SOURCE).read_text().strip()
    assert artifact.lib_path.is_file()


def test_jit_cuda_compile_without_gpu_gives_cuda_source():
    k = tileauto.jit(out_idx=[-1], target=CUDA_SM90)(kernels.cuda_double)()
    assert "__global__" in k.get_kernel_source()
    assert k.target.kind.name == "cuda"


def test_cuda_kernel_without_thread_bindings_is_a_compile_error():
    impl = tileauto.jit(out_idx=[-1], target=CUDA_SM90)(kernels.unbound_double)
    with pytest.raises(CompileError, match="blockIdx/threadIdx"):
        impl()


@pytest.mark.gpu
def test_cuda_kernel_runs_on_the_gpu():
    k = tileauto.jit(out_idx=[-1], target="cuda")(kernels.cuda_double)()
    a = torch.randn(4096, device="cuda")
    torch.testing.assert_close(k(a), 2 * a)
    with pytest.raises(KernelArgumentError, match="wrong device"):
        k(a.cpu())


def test_a_cuda_kernel_with_an_int_scalar_compiles_without_a_gpu():
    k = tileauto.jit(out_idx=[-1], target="cuda")(kernels.cuda_add_k)(4096)
    assert [p.name for p in k.params] == ["A", "k", "B"] and k.params[1].scalar


@pytest.mark.gpu
def test_a_cuda_kernel_takes_an_int_scalar_in_range_and_names_one_outside():
    # the C call slot checks an integer scalar's range on every call (TVM would wrap it)
    k = tileauto.jit(out_idx=[-1], target="cuda")(kernels.cuda_add_k)(1 << 20)
    a = torch.randn(1 << 20, device="cuda")
    for value in (0, 7, -3, 2**31 - 1):
        torch.testing.assert_close(k(a, value), a + float(value))
    for value in (2**31, -(2**31) - 1):
        with pytest.raises(KernelArgumentError, match="'k': a scalar int32 holds"):
            k(a, value)
    with pytest.raises(KernelArgumentError, match="'k': expected a scalar int32"):
        k(a, 1.5)


def test_a_kernel_copies_as_itself_and_says_how_to_ship_it_when_pickled():
    import copy
    import pickle

    kernel = tileauto.jit(out_idx=[-1], target="llvm")(kernels.vector_add)(64, 8)
    assert copy.copy(kernel) is kernel and copy.deepcopy(kernel) is kernel
    model = torch.nn.Module()
    model.kernel = kernel  # a module holding a kernel (an attribute, not a submodule)
    assert copy.deepcopy(model).kernel is kernel
    with pytest.raises(TypeError, match="cannot be pickled.*export_library"):
        pickle.dumps(kernel)


@pytest.mark.parametrize("count", [1, 17])  # 17: more than the C slot holds (the Python path)
def test_a_bool_for_an_integer_scalar_is_refused_by_name(count):
    # it ran as 1 (or 0) on every call path: a flag passed where a count belongs
    k = tileauto.jit(out_idx=[-1], target="llvm")(kernels.add_scalars)(count)
    a = torch.zeros(8, dtype=torch.int32)
    args = [True] + [1] * (count - 1)
    message = r"argument 1 \(parameter 'k0': expected a scalar int32 \(a Python int\), got bool"
    for call in (lambda: k(a, *args), lambda: k(a, *args, torch.empty_like(a))):
        with pytest.raises(KernelArgumentError, match=message):
            call()
    with pytest.raises(KernelArgumentError, match=message):
        k.prepare(a, *args)
    assert int(k(a, *[1] * count)[0]) == count
