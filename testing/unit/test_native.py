"""Tests of tileauto._native: the C++ timing helper and its Python fallback.

The helper must be present after ``pip install`` (regular or editable). Set
``TILEAUTO_ALLOW_MISSING_NATIVE=1`` to skip, instead of fail, the tests that need it (for
example in a source checkout that was never built).
"""

from __future__ import annotations

import os
import statistics

import pytest
import torch
import tvm
from tvm import te

from tileauto import _native
from tileauto.errors import TileautoError

N = 1 << 20  # 1M float32 per vector: 4 MiB each, a kernel that takes a measurable time
FLUSH_BYTES = 8 << 20
ALLOW_MISSING_ENV = "TILEAUTO_ALLOW_MISSING_NATIVE"


def _require_native():
    helper = _native.load_native()
    if helper is not None:
        return helper
    where = ", ".join(str(p) for p in _native.native_library_candidates())
    if os.environ.get(ALLOW_MISSING_ENV) == "1":
        pytest.skip(
            f"native timer not built ({ALLOW_MISSING_ENV}=1 allows that); looked in {where}"
        )
    pytest.fail(
        f"native timer (libtileauto_native) is missing after install; looked in {where}. "
        f"Build it with `pip install .` or `pip install -e .`, or set {ALLOW_MISSING_ENV}=1 to skip."
    )


@pytest.fixture(scope="module")
def vector_add():
    """A TVM-compiled CPU kernel ``C = A + B`` on 1M float32."""
    a = te.placeholder((N,), "float32", name="A")
    b = te.placeholder((N,), "float32", name="B")
    c = te.compute((N,), lambda i: a[i] + b[i], name="C")
    executable = tvm.compile(
        te.create_prim_func([a, b, c]), target=tvm.target.Target.from_device("cpu")
    )
    return executable["main"]


@pytest.fixture
def tensors():
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(N, generator=gen)
    b = torch.rand(N, generator=gen)
    c = torch.full((N,), float("nan"))
    return a, b, c


def _assert_ran(tensors) -> None:
    a, b, c = tensors
    torch.testing.assert_close(c, a + b)


def _assert_samples(samples, repeat: int) -> None:
    assert isinstance(samples, list)
    assert len(samples) == repeat
    assert all(type(s) is int and s > 0 for s in samples), samples


def test_native_helper_is_installed():
    helper = _require_native()
    assert _native.native_available()
    assert _native.load_native() is helper  # cached


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("flush_bytes", [0, FLUSH_BYTES], ids=["no-flush", "flush"])
def test_samples_are_positive_ints_one_per_call(vector_add, tensors, native, flush_bytes):
    if native:
        _require_native()
    samples = _native.time_function(
        vector_add, tensors, repeat=7, flush_bytes=flush_bytes, native=native
    )
    _assert_samples(samples, 7)
    _assert_ran(tensors)


def test_default_uses_native_for_ffi_functions(vector_add, tensors, monkeypatch):
    helper = _require_native()
    calls = []

    def spy(*args):
        calls.append(args[1:3])
        return helper(*args)

    monkeypatch.setattr(_native, "load_native", lambda: spy)
    samples = _native.time_function(vector_add, tensors, repeat=3, flush_bytes=64)
    _assert_samples(samples, 3)
    assert calls == [(3, 64)]
    _assert_ran(tensors)


def test_native_and_python_medians_agree(vector_add, tensors):
    _require_native()
    repeat = 25
    medians = {}
    for rnd in range(2):  # interleaved rounds, so that a burst of load hits both paths
        for native in (True, False):
            _native.time_function(vector_add, tensors, repeat=3, native=native)  # warm-up
            samples = _native.time_function(vector_add, tensors, repeat=repeat, native=native)
            _assert_samples(samples, repeat)
            medians.setdefault(native, []).append(statistics.median(samples))
    native_ns, python_ns = min(medians[True]), min(medians[False])
    ratio = max(native_ns, python_ns) / min(native_ns, python_ns)
    assert ratio < 3.0, f"native median {native_ns} ns, python median {python_ns} ns"
    _assert_ran(tensors)


def test_native_calls_func_repeat_times_with_the_same_tensors(tensors):
    _require_native()
    seen = []
    samples = _native.time_function(
        lambda *args: seen.append(args), tensors, repeat=4, flush_bytes=4096, native=True
    )
    _assert_samples(samples, 4)
    assert len(seen) == 4
    for args in seen:
        assert len(args) == 3
        # The callback gets FFI tensors that alias the caller's torch storage (zero copy).
        ptrs = [torch.from_dlpack(t).data_ptr() for t in args]
        assert ptrs == [t.data_ptr() for t in tensors]


def test_native_passes_non_tensor_arguments_through():
    _require_native()
    seen = []
    _native.time_function(lambda *a: seen.append(a), (7, 2.5, "x"), repeat=1, native=True)
    assert seen == [(7, 2.5, "x")]


def test_native_propagates_errors_from_func():
    _require_native()

    def boom():
        raise KeyError("from the timed function")

    with pytest.raises(KeyError, match="from the timed function"):
        _native.time_function(boom, (), repeat=2, native=True)


def test_native_helper_validates_its_arguments():
    helper = _require_native()
    with pytest.raises(ValueError, match="repeat"):
        helper(lambda: None, 0, 0)
    with pytest.raises(ValueError, match="flush_bytes"):
        helper(lambda: None, 1, -1)
    with pytest.raises(TypeError, match="at least 3"):
        helper(lambda: None, 1)
    with pytest.raises(TypeError, match="`f`"):
        helper(3, 1, 0)


def test_python_callable_defaults_to_python_loop(tensors):
    seen = []
    samples = _native.time_function(lambda *a: seen.append(a), tensors, repeat=2)
    assert len(samples) == 2
    assert all(type(s) is int and s >= 0 for s in samples)
    assert all(x is y for args in seen for x, y in zip(args, tensors))  # unchanged torch tensors


@pytest.mark.parametrize(
    ("repeat", "flush_bytes", "name"),
    [(0, 0, "repeat"), (1.5, 0, "repeat"), (3, -1, "flush_bytes")],
)
@pytest.mark.parametrize("native", [None, False])
def test_bad_counts_name_the_argument(repeat, flush_bytes, name, native):
    with pytest.raises(ValueError, match=name):
        _native.time_function(
            lambda: None, (), repeat=repeat, flush_bytes=flush_bytes, native=native
        )


def test_native_true_without_helper_raises_clearly(monkeypatch):
    monkeypatch.setattr(_native, "load_native", lambda: None)
    with pytest.raises(TileautoError, match="native timing helper"):
        _native.time_function(lambda: None, (), repeat=1, native=True)
    assert len(_native.time_function(lambda: None, (), repeat=2)) == 2  # default falls back


def test_native_samples_come_back_in_one_copy():
    """The helper returns a Shape (a tuple in Python), not an Array: reading an Array's
    elements one by one made 100,000 samples take 30 s, quadratic in the count."""
    import tvm_ffi

    helper = _require_native()
    noop = tvm_ffi.convert(lambda: None)
    samples = helper(noop, 50_000, 0)
    assert isinstance(samples, tuple) and len(samples) == 50_000
    assert all(isinstance(s, int) and s >= 0 for s in samples[:10])


# -- the output caller (src/caller.cc) -------------------------------------------------------
def _output_caller():
    _require_native()
    make = _native.output_caller()
    assert make is not None, "the installed helper has no tileauto.native.output_caller"
    return make


def _shape_dtype_device(n: int, like: int = -1):
    import tvm_ffi

    return tvm_ffi.Shape((n,)), tvm_ffi.dtype("float32"), tvm_ffi.device("cpu", 0), like


def test_output_caller_allocates_a_fresh_torch_output_each_call(vector_add, tensors):
    a, b, _ = tensors
    call = _output_caller()(vector_add, *_shape_dtype_device(N))
    first = call(a, b)
    second = call(a, b)
    assert isinstance(first, torch.Tensor) and first.dtype == torch.float32
    assert first.shape == (N,) and first.is_contiguous() and first.device.type == "cpu"
    torch.testing.assert_close(first, a + b)
    assert first.data_ptr() != second.data_ptr()  # two live outputs, two buffers
    first.zero_()  # an ordinary, writable tensor that owns its memory
    torch.testing.assert_close(second, a + b)


def test_output_caller_returns_none_without_an_allocator(vector_add, tensors):
    """numpy arrays bring no allocator: nothing is allocated or run, the caller allocates."""
    a, b, _ = tensors
    call = _output_caller()(vector_add, *_shape_dtype_device(N))
    assert call(a.numpy(), b.numpy()) is None


def test_output_caller_propagates_the_kernels_errors(vector_add):
    call = _output_caller()(vector_add, *_shape_dtype_device(N))
    with pytest.raises(ValueError, match="shape"):
        call(torch.zeros(N // 2), torch.zeros(N // 2))


def test_output_caller_shapes_the_output_like_an_input():
    """like >= 0: the output takes that input's shape on every call (symbolic sizes)."""
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    double = tvm.compile(te.create_prim_func([a, b]), target="llvm")["main"]
    call = _output_caller()(double, *_shape_dtype_device(0, like=0))
    for size in (3, 17):
        x = torch.randn(size)
        out = call(x)
        assert out.shape == (size,)
        torch.testing.assert_close(out, 2 * x)
    assert call([1.0, 2.0]) is None  # not a tensor: the caller's own path reports it
    assert call() is None


# -- JITKernel's C call slot (src/kernel_call.c) ---------------------------------------------
_BLOCK_KERNEL_CALL = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tileauto._kernel_call":
            raise ImportError("blocked by the test")
        return None
sys.meta_path.insert(0, Block())
"""

_CALL_A_KERNEL = """
import torch
from tvm import te
import tileauto
from tileauto.jit.kernel import JITKernel
def double(n):
    a = te.placeholder((n,), "float32", name="A")
    return te.create_prim_func([a, te.compute((n,), lambda i: a[i] * 2.0, name="B")])
k = tileauto.jit(out_idx=[-1], target="llvm")(double)(8)
x = torch.randn(8)
torch.testing.assert_close(k(x), 2 * x)
out = torch.empty(8)
assert k(x, out) is out
print(JITKernel.__mro__[1].__name__, "__call__" in JITKernel.__dict__)
"""


def _run_python(code: str, tmp_path) -> str:
    import subprocess
    import sys

    env = {**os.environ, "TILEAUTO_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_kernel_call_module_is_found_through_the_install_record(tmp_path):
    """A source checkout that shadows the installed package: the module is not importable by
    name, and the file the distribution's RECORD lists is loaded instead."""
    if _native.kernel_call_base() is None:
        _require_native()
        pytest.fail("tileauto._kernel_call is missing after install")
    assert _run_python(_BLOCK_KERNEL_CALL + _CALL_A_KERNEL, tmp_path) == "KernelCall False"


def test_without_the_kernel_call_module_the_python_call_serves(tmp_path):
    code = (
        _BLOCK_KERNEL_CALL
        + "import importlib.metadata as md\n"
        + "def gone(name):\n    raise md.PackageNotFoundError(name)\n"
        + "md.distribution = gone\n"
        + _CALL_A_KERNEL
    )
    assert _run_python(code, tmp_path) == "object True"
