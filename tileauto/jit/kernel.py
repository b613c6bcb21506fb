"""JITKernel: a compiled kernel called with torch tensors, outputs allocated for the caller."""

from __future__ import annotations

import json
import math
import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tileauto.artifact import KernelArtifact, ParamSpec, evaluate_dim
from tileauto.errors import KernelArgumentError, TileautoError
from tileauto.jit import launcher
from tileauto.jit import runtime as tvm_runtime  # loads kernels without TVM's compiler
from tileauto.jit.thread_pool import decide_spin
from tileauto.settings import Settings, available_cpus

if TYPE_CHECKING:
    import tvm

_TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "float8_e4m3fn": getattr(torch, "float8_e4m3fn", torch.uint8),
    "float8_e5m2": getattr(torch, "float8_e5m2", torch.uint8),
}


# Errors that a call with bad arguments raises inside TVM (or while allocating outputs); they are
# turned into a KernelArgumentError naming the bad argument when one is found.
_ARGUMENT_ERRORS = (TypeError, ValueError, RuntimeError, IndexError, AttributeError)
# Largest output (bytes) that gets an allocation template (see JITKernel._init_call_plan).
_TEMPLATE_MAX_BYTES = 64 * 1024
_empty_like = torch.empty_like
_CONTIGUOUS = torch.contiguous_format


def _kernel_call_base() -> type:
    from tileauto._native import kernel_call_base

    return kernel_call_base() or object


# JITKernel's base: the C call slot of src/kernel_call.c where it was built (k(a) then calls
# the native output caller with no Python frame in between), else object (__call__ is Python).
if TYPE_CHECKING:
    from tileauto._kernel_call import KernelCall as _KernelCallBase
else:
    _KernelCallBase = _kernel_call_base()
_C_CALL = _KernelCallBase is not object


def _native_output_call(
    func: Any, shape: tuple[int, ...] | None, dtype: str, like: int | None = None
) -> Any:
    """``g(*inputs) -> out``: ``func(*inputs, out)`` with ``out`` (CPU, ``dtype``, contiguous,
    of ``shape`` or else of the shape of ``inputs[like]``) allocated in C++ by the native
    helper (see :func:`tileauto._native.output_caller`); None where the helper is missing or
    ``func`` is not an FFI function."""
    from tileauto._native import output_caller

    make = output_caller()
    if make is None:
        return None
    try:
        import tvm_ffi

        if not isinstance(func, tvm_ffi.Function):
            return None
        return make(
            func,
            tvm_ffi.Shape(shape or ()),
            tvm_ffi.dtype(dtype),
            tvm_ffi.device("cpu", 0),
            -1 if like is None else like,
        )
    except Exception:  # noqa: BLE001 - a dtype tvm-ffi cannot name: the Python path serves it
        return None


def _set_direct_call(
    kernel: Any,
    func: Any,
    out_shapes: tuple[tuple[int, ...], ...] | None,
    like: int | None,
    dtype: str | None,
) -> None:
    """Give the C call slot the compiled function itself, to be called with torch tensors as
    DLTensor views (``direct_call`` in ``src/kernel_call.c``: small CPU calls, no FFI tensor
    objects in between), where torch exports its DLPack C exchange API; k(*inputs) allocates
    the one output of ``out_shapes[0]`` or shaped like ``inputs[like]``, of ``dtype``."""
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if api is None:
        return
    try:
        import tvm_ffi
        from tvm_ffi.core import Error

        if not isinstance(func, tvm_ffi.Function):
            return
        code = None
        if dtype is not None:
            ffi_dtype = tvm_ffi.dtype(dtype)
            code = (ffi_dtype.type_code, ffi_dtype.bits, ffi_dtype.lanes)
        kernel._set_direct_call(
            func,
            func.__chandle__(),
            torch.Tensor,
            api,
            Error,
            None if out_shapes is None else out_shapes[0],
            -1 if like is None else like,
            code,
        )
    except Exception:  # noqa: BLE001 - an API this build cannot use: the other paths serve
        kernel._set_direct_call(None)


def _ffi_views(args: tuple) -> tuple:
    """``args`` with each CPU torch tensor as a tvm-ffi Tensor over the same memory (made
    once, so that calling the kernel with them converts nothing); the rest as they are."""
    try:
        import tvm_ffi
    except ImportError:
        return args
    return tuple(
        tvm_ffi.from_dlpack(a) if isinstance(a, torch.Tensor) and a.device.type == "cpu" else a
        for a in args
    )


def configure_thread_pool(num_threads: int) -> int:
    """Make TVM's CPU thread pool of the calling thread run ``num_threads`` threads.

    TVM gives each thread its own pool, sized from ``TVM_NUM_THREADS`` when the pool starts
    (by default half the cores on x86: one thread on a 2-core machine); afterwards it can be
    set to any count up to that size (``runtime.config_threadpool``), never above it. So when
    ``TVM_NUM_THREADS`` is unset, it is set here to every core (the pools the process starts
    from now on, in any thread, can then run up to that) before this thread's pool is asked
    for its size, which starts it. A variable the caller set is left alone. Before that, the
    busy-machine rule of :mod:`tileauto.jit.thread_pool` decides, once per process, whether TVM's
    pool may spin (``TVM_THREAD_POOL_SPIN_COUNT``).

    Returns:
        The thread count the calling thread's pool runs with now; less than ``num_threads``
        when the pool had started smaller (see :meth:`JITKernel.use_threads`).
    """
    decide_spin(num_threads)  # before the pool starts: TVM reads the spin count then
    if "TVM_NUM_THREADS" in os.environ:
        current = tvm_runtime.num_threads()
    else:
        cores = available_cpus()
        os.environ["TVM_NUM_THREADS"] = str(max(num_threads, cores))
        current = tvm_runtime.num_threads()  # starts this thread's pool if it has none
        # what later pools get: the rule's default, so a later tuning reads no foreign count
        os.environ["TVM_NUM_THREADS"] = str(cores)
    if current != num_threads:
        # mode 1 (kBig) is what TVM's pool starts with: every core on a homogeneous CPU
        tvm_runtime.config_threadpool(1, num_threads)
        current = tvm_runtime.num_threads()
    return current


def uses_thread_pool(lib_path: Path) -> bool:
    """Whether a CPU kernel library has parallel loops (it calls TVM's thread pool)."""
    try:
        return b"TVMBackendParallelLaunch" in lib_path.read_bytes()
    except OSError:
        return False


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype for a TVM dtype string."""
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        raise KernelArgumentError(f"dtype {dtype!r} has no torch equivalent") from None


class JITKernel(_KernelCallBase):
    """A compiled kernel. Call it with the input tensors; it returns the outputs.

    Inputs are the parameters not listed in ``out_idx``, in order; outputs are allocated with
    the right shape, dtype and device and returned (one tensor, or a tuple). Called with every
    parameter, outputs included (in parameter order), it writes into the given outputs instead
    and returns them: no allocation, for hot loops that reuse their buffers. Tensors are passed
    without copying (DLPack). Wrong arguments raise :class:`KernelArgumentError`.
    """

    def __init__(
        self, artifact: KernelArtifact, module: Any = None, num_threads: int | None = None
    ) -> None:
        self.artifact = artifact
        self._module = module
        self.num_threads: int | None = None  # set for parallel CPU kernels (use_threads)
        self.thread_pool: str | None = None  # "tileauto" or "tvm", for parallel CPU kernels
        if module is None:
            try:
                self._module = tvm_runtime.load_module(artifact.lib_path, artifact.device_type)
            except Exception as exc:
                if artifact.device_type != "cuda" or tvm_runtime.enabled("cuda"):
                    raise
                # Compiled for CUDA on a machine without the CUDA runtime: sources stay readable.
                self._func = _no_cuda_runtime(artifact.func_name, exc)
        if self._module is not None:
            self._func = self._module[artifact.func_name]
        self.params: tuple[ParamSpec, ...] = artifact.params
        outs = set(artifact.out_idx)
        self._in_pos = tuple(i for i in range(len(self.params)) if i not in outs)
        self._out_pos = tuple(sorted(outs))
        self._bind_sources = self._symbol_sources()
        self._check_outputs_resolvable()
        self._static_outs = all(self.params[i].static_shape is not None for i in self._out_pos)
        self._out_dtypes = tuple(torch_dtype(self.params[i].dtype) for i in self._out_pos)
        self._target: Any = None
        self.origin: tuple | None = None  # (JITImpl, args, kwargs) when made by a @jit factory
        self._init_call_plan()
        if (
            artifact.device_type == "cpu"
            and self._module is not None
            and uses_thread_pool(artifact.lib_path)
        ):
            # after TVM's loader, which points the library's parallel loops at TVM's pool
            self.thread_pool = "tileauto" if launcher.install(artifact.lib_path) else "tvm"
            self.use_threads(num_threads)

    # -- public surface --------------------------------------------------------------------
    def use_threads(self, num_threads: int | None = None) -> int:
        """Run this kernel with ``num_threads`` CPU threads.

        Called when the kernel is loaded, with the count it was tuned with (the thread-count
        rule of ``docs/tuning.md``: ``num_threads`` option, ``TILEAUTO_NUM_THREADS``,
        ``TVM_NUM_THREADS``, every core; None applies that rule). The parallel loops of
        tileauto's kernels run on tileauto's thread pool (:mod:`tileauto.jit.launcher`), one
        per process and shared by every tileauto kernel: the last count set holds. A kernel
        that keeps TVM's pool (``thread_pool == "tvm"``: a library with TVM's parallel
        barrier, or an install without the extension) runs on the calling thread's TVM pool,
        which cannot grow once started: then this warns when the count it runs with differs.
        Returns that count.
        """
        wanted = Settings.from_env().run_threads() if num_threads is None else num_threads
        if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
            raise ValueError(f"num_threads must be an int >= 1, got {num_threads!r}")
        self.num_threads = wanted
        if self.thread_pool == "tileauto":
            return launcher.set_threads(wanted)
        got = configure_thread_pool(wanted)
        if got != wanted:
            warnings.warn(
                f"tileauto: kernel {self.func_name} was tuned with {wanted} threads but TVM's "
                f"thread pool in this thread started smaller, before the kernel was loaded; it "
                f"runs with {got}. Set TVM_NUM_THREADS={wanted} before the first TVM kernel "
                f"runs, or tune with num_threads={got}.",
                RuntimeWarning,
                stacklevel=2,
            )
        return got

    @property
    def config(self) -> dict[str, Any]:
        """The tunable arguments this kernel was built with."""
        return dict(self.artifact.config)

    @property
    def target(self) -> tvm.target.Target:
        """The TVM target the kernel was compiled for."""
        if self._target is None:
            import tvm  # the compiler's Target class: imported when asked for

            self._target = tvm.target.Target(self.artifact.target)
        return self._target

    @property
    def func_name(self) -> str:
        return self.artifact.func_name

    @property
    def num_inputs(self) -> int:
        return len(self._in_pos)

    def get_kernel_source(self) -> str:
        """Device code: CUDA C for GPU targets, LLVM IR for CPU targets."""
        return self._read_source(KernelArtifact.KERNEL_SOURCE)

    def get_host_source(self) -> str:
        """Host-side LLVM IR (argument checks and launch code)."""
        return self._read_source(KernelArtifact.HOST_SOURCE)

    def get_script(self) -> str:
        """The TVMScript of the PrimFunc that was compiled."""
        return self._read_source(KernelArtifact.SCRIPT)

    def _read_source(self, name: str) -> str:
        """A source file of the kernel's folder; a missing one says which and what to do."""
        path = self.artifact.directory / name
        try:
            return path.read_text()
        except FileNotFoundError as exc:
            raise TileautoError(
                f"{name} is not in the kernel's folder {self.artifact.directory} (saved without "
                "its sources, or removed since): compile the kernel again, or load the result "
                "with load_from_disk(..., factory=...)"
            ) from exc

    def get_function(self) -> Callable[..., Any]:
        """The raw compiled TVM function (destination-passing: give it every buffer)."""
        return self._func

    def export_library(self, path: str | Path) -> Path:
        """Copy the shared library to ``path`` and its description to ``path + '.json'``.

        Load it back, in this or another process, with :meth:`load_library`.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.artifact.lib_path, path)
        meta = self.artifact.to_json()
        meta.pop("directory")
        Path(f"{path}.json").write_text(json.dumps(meta, indent=1, default=str))
        return path

    @classmethod
    def load_library(cls, path: str | Path) -> JITKernel:
        """Load a kernel written by :meth:`export_library` (no compiler needed)."""
        path = Path(path)
        meta_path = Path(f"{path}.json")
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{meta_path} is missing: export_library writes it next to the library"
            )
        meta = json.loads(meta_path.read_text())
        artifact = KernelArtifact.from_json(meta, directory=path.parent)
        module = tvm_runtime.load_module(path, artifact.device_type)
        return cls(artifact, module)

    @classmethod
    def from_artifact(cls, artifact: KernelArtifact) -> JITKernel:
        """Load a kernel from an artifact directory."""
        return cls(artifact)

    def _call_python(self, *args: Any) -> Any:
        # The call (``__call__``; with the C call slot, what it does not serve itself). Fast
        # paths (see _init_call_plan): every buffer given (destination passing), where TVM's
        # own checks are the only checks; one output after the inputs (static, or shaped like
        # an input), allocated in C++ by the native caller; and one output after the inputs,
        # allocated from a template or like an input. Everything else, a wrong argument count
        # included, takes the general path.
        if len(args) == self._num_params:
            try:
                self._func(*args)
            except _ARGUMENT_ERRORS as exc:
                self._raise_argument_error(args, exc)
                raise
            single = self._single_out
            if single is not None:
                return args[single]
            return tuple(args[p] for p in self._out_pos)
        native = self._native_out
        if native is not None and len(args) == self._num_in:
            try:
                out = native(*args)
            except _ARGUMENT_ERRORS as exc:
                self._raise_argument_error(args, exc)
                raise
            if out is not None:
                return out
            # None: no argument brought an allocator (not torch tensors); allocate below
        template = self._out_template
        like = self._out_like
        if (template is not None or like is not None) and len(args) == self._num_in:
            try:
                if template is not None:
                    out = _empty_like(template)
                elif like is not None:
                    out = _empty_like(args[like], memory_format=_CONTIGUOUS)
                self._func(*args, out)
            except _ARGUMENT_ERRORS as exc:
                self._raise_argument_error(args, exc)
                raise
            return out
        return self._call(args)

    if _C_CALL:

        def _fast_failed(self, args: tuple, exc: BaseException) -> None:
            """The C call slot's native output caller rejected ``args`` (``exc``, the kernel's
            own check, before it ran): raise the KernelArgumentError that names the argument,
            or return (the slot then raises ``exc``)."""
            self._raise_argument_error(args, exc)

    else:
        __call__ = _call_python

    def prepare(self, *args: Any) -> Callable[[], Any]:
        """Check ``args`` once, allocate outputs once, and return a call with no per-call work.

        ``args`` are the inputs (outputs are allocated here), or every parameter with the
        outputs to write into. The returned function runs the kernel on the same tensors each
        time and returns the same output tensors (overwritten in place). On the CPU the
        tensors are handed to TVM's FFI once, here, so a call converts nothing: it sees the
        tensors' memory as it is now, and a tensor given new storage afterwards (``set_``,
        ``resize_``) is not followed; prepare again after that.
        """
        if len(args) == self._num_params and self._out_pos:
            self._raise_argument_error(args, None)
            full = tuple(args)
            outs = [args[p] for p in self._out_pos]
        elif len(args) == self._num_in:
            self._raise_argument_error(args, None)
            outs = self._allocate_outputs(args)
            # A tuple, not a list: ``func(*full)`` then passes it on without building a new one.
            full = tuple(self._interleave(args, outs))
        else:
            raise KernelArgumentError(self._count_message(len(args)))
        func = self._func
        result = outs[0] if len(outs) == 1 else (tuple(outs) if outs else None)
        if self.artifact.device_type == "cpu":
            full = _ffi_views(full)

        def call() -> Any:
            func(*full)
            return result

        return call

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {list(p.shape)} {p.dtype}" for p in self.params)
        return f"JITKernel({self.func_name}({sig}), out_idx={list(self._out_pos)}, config={self.config})"

    # -- internals -------------------------------------------------------------------------
    def _init_call_plan(self) -> None:
        """Precompute what a call needs, so that the common call does no per-call planning.

        A call costs a few hundred nanoseconds of Python around the kernel, and on tiny
        tensors that is the whole cost, so the usual case gets a path of its own: static output
        shapes on the CPU. Outputs are then allocated with ``torch.empty_like`` of a template
        made here (the output's shape, dtype, device and strides, no argument parsing), which
        is the cheapest allocation torch offers from Python (``torch.empty(shape, dtype=,
        device=)`` costs about 1.8x as much), and the output device is known without asking
        the first input. Templates hold memory, so only outputs up to
        ``_TEMPLATE_MAX_BYTES`` get one; a larger output is allocated with precomputed
        arguments, and its kernel's run time dwarfs the difference anyway.

        Cheaper still, where the native helper is installed: one output after the inputs, on
        the CPU, static or shaped like an input, is allocated in C++ (``src/caller.cc``) with
        the allocator of the arguments' framework, inside one call that also runs the kernel
        and hands the output back as a torch tensor; no Python call to torch at all
        (``bench/overhead.py``: ``k(a)`` 1.2x ``torch.mul(a, b)``, against 1.4x with
        ``empty_like``). With the C call slot (``src/kernel_call.c``) that caller, and the
        compiled function for destination passing, are called with no Python frame at all
        (``k(a)`` 1.04x ``torch.mul(a, b)``). Before either, a small call with CPU torch tensors
        calls the compiled function from C with the tensors as DLTensor views (the direct call
        of ``src/kernel_call.c``, from torch's DLPack C exchange API): no FFI tensor objects
        at all (``k(a)`` 0.79x ``torch.mul(a, b)``).
        """
        self._num_in = len(self._in_pos)
        # Destination passing (every buffer given) is told apart from the usual call by the
        # count; a kernel without outputs has one form only, which the usual path serves.
        self._num_params = len(self.params) if self._out_pos else -1
        self._single_out = self._out_pos[0] if len(self._out_pos) == 1 else None
        # outputs after all inputs (out_idx=[-1] and the like): func(*inputs, *outputs)
        self._trailing_outs = self._out_pos == tuple(range(self._num_in, len(self.params)))
        self._out_device: torch.device | None = (
            torch.device("cpu") if self.artifact.device_type == "cpu" else None
        )
        self._out_shapes: tuple[tuple[int, ...], ...] | None = None
        self._out_templates: tuple[torch.Tensor, ...] | None = None
        if self._static_outs:
            self._out_shapes = tuple(
                shape for p in self._out_pos if (shape := self.params[p].static_shape) is not None
            )
            if self._out_device is not None and all(
                math.prod(shape) * dtype.itemsize <= _TEMPLATE_MAX_BYTES
                for shape, dtype in zip(self._out_shapes, self._out_dtypes)
            ):
                self._out_templates = tuple(
                    torch.empty(shape, dtype=dtype, device=self._out_device)
                    for shape, dtype in zip(self._out_shapes, self._out_dtypes)
                )
        self._out_template: torch.Tensor | None = None
        self._out_like: int | None = None
        self._native_out: Callable[..., Any] | None = None
        # the dtype of the one output that k(*inputs) allocates in C/C++, or None
        native_dtype: str | None = None
        if len(self._out_pos) == 1 and self._trailing_outs:
            if self._out_templates is not None:
                self._out_template = self._out_templates[0]
            else:
                self._out_like = self._input_like(self._out_pos[0])
            if self.artifact.device_type == "cpu" and (
                self._out_shapes is not None or self._out_like is not None
            ):
                native_dtype = self.params[self._out_pos[0]].dtype
                self._native_out = _native_output_call(
                    self._func,
                    None if self._out_shapes is None else self._out_shapes[0],
                    native_dtype,
                    self._out_like,
                )
        if _C_CALL:
            # From the C call slot straight to the native output caller (k(*inputs)) and to the
            # kernel (k(*every_buffer), one output); before either, for small calls with CPU
            # torch tensors, the kernel called with DLTensor views (the direct call)
            self._set_fast_call(self._native_out, self._num_in, _ARGUMENT_ERRORS)
            if self._single_out is not None and self._num_params > 0:
                self._set_dest_call(self._func, self._num_params, self._single_out)
            if self.artifact.device_type == "cpu" and (
                native_dtype is not None or self._single_out is not None
            ):
                _set_direct_call(
                    self,
                    self._func,
                    self._out_shapes if native_dtype is not None else None,
                    self._out_like if native_dtype is not None else None,
                    native_dtype,
                )
        # Symbolic output shapes: each dim is an int, the (input, dim) that binds a size
        # variable, or an expression over the size variables (evaluated with the bindings).
        self._out_dims = tuple(
            tuple(
                dim if isinstance(dim, int) else self._bind_sources.get(dim, dim)
                for dim in self.params[p].shape
            )
            for p in self._out_pos
        )

    def _input_like(self, out: int) -> int | None:
        """The first input with the output's exact shape and dtype (then the output is allocated
        with ``empty_like`` of it, whatever the sizes its size variables take), or None."""
        spec = self.params[out]
        for k, pos in enumerate(self._in_pos):
            other = self.params[pos]
            if (
                not other.scalar
                and other.dtype == spec.dtype
                and tuple(other.shape) == tuple(spec.shape)
            ):
                return k
        return None

    def _call(self, args: tuple) -> Any:
        """The general call: any argument count (the error), outputs anywhere, symbolic shapes."""
        if len(args) != self._num_in:
            raise KernelArgumentError(self._count_message(len(args)))
        try:
            outs = self._allocate_outputs(args)
            if self._trailing_outs:
                self._func(*args, *outs)
            else:
                self._func(*self._interleave(args, outs))
        except _ARGUMENT_ERRORS as exc:
            self._raise_argument_error(args, exc)
            raise
        return outs[0] if len(outs) == 1 else (tuple(outs) if outs else None)

    def _interleave(self, args: tuple, outs: list) -> list:
        full: list = [None] * len(self.params)
        for pos, value in zip(self._in_pos, args):
            full[pos] = value
        for pos, value in zip(self._out_pos, outs):
            full[pos] = value
        return full

    def _allocate_outputs(self, args: tuple) -> list:
        if not self._out_pos:
            return []
        templates = self._out_templates
        if templates is not None:
            return [_empty_like(t) for t in templates]
        device = self._out_device
        if device is None:  # a GPU kernel: the outputs go where the inputs are
            device = next(
                (a.device for a in args if isinstance(a, torch.Tensor)),
                torch.device(self.artifact.device_type),
            )
        shapes: Sequence[tuple[int, ...]] | None = self._out_shapes
        if shapes is None:
            shapes = self._resolve_out_shapes(args)
        return [
            torch.empty(shape, dtype=dtype, device=device)
            for shape, dtype in zip(shapes, self._out_dtypes)
        ]

    def _resolve_out_shapes(self, args: tuple) -> list[tuple[int, ...]]:
        """The output shapes for these inputs (a size variable alone is read off its input)."""
        bindings: dict[str, int] | None = None
        shapes = []
        for dims in self._out_dims:
            shape = []
            for dim in dims:
                if isinstance(dim, int):
                    shape.append(dim)
                elif isinstance(dim, tuple):
                    shape.append(_bound_size(args, dim))
                else:
                    if bindings is None:
                        bindings = {
                            s: _bound_size(args, source) for s, source in self._bind_sources.items()
                        }
                    shape.append(evaluate_dim(dim, bindings))
            shapes.append(tuple(shape))
        return shapes

    def _symbol_sources(self) -> dict[str, tuple[int, int]]:
        """For each size variable (by key), the (input index, dim) that binds it (dim -1: the
        input is a scalar argument that is the variable, such as a length ``n: T.int32``)."""
        sources: dict[str, tuple[int, int]] = {}
        for k, pos in enumerate(self._in_pos):
            if self.params[pos].scalar:
                sources.setdefault(self.params[pos].size_var, (k, -1))
                continue
            for d, dim in enumerate(self.params[pos].shape):
                if isinstance(dim, str) and dim.isidentifier() and dim not in sources:
                    sources[dim] = (k, d)
        return sources

    def _check_outputs_resolvable(self) -> None:
        for pos in self._out_pos:
            try:
                self.params[pos].resolve_shape({s: 1 for s in self._bind_sources})
            except KeyError as exc:
                name = dict(self.params[pos].renamed).get(exc.args[0], exc.args[0])
                raise KernelArgumentError(
                    f"output {self.params[pos].name} has a dimension {name!r} that no input binds: "
                    f"tileauto cannot allocate it; make it an input (drop it from out_idx)"
                ) from None

    def _count_message(self, got: int) -> str:
        names = ", ".join(self.params[p].name for p in self._in_pos)
        if not self._out_pos:
            return f"{self.func_name} takes {len(self._in_pos)} tensor(s) ({names}); got {got}."
        every = ", ".join(p.name for p in self.params)
        return (
            f"{self.func_name} takes {len(self._in_pos)} input tensor(s) ({names}); got {got}. "
            f"Outputs {[self.params[p].name for p in self._out_pos]} are allocated and returned; "
            f"to write into your own, pass all {len(self.params)} ({every})."
        )

    def _raise_argument_error(self, args: tuple, cause: BaseException | None) -> None:
        """Raise a KernelArgumentError naming the first bad argument, if any is bad.

        ``args`` are the inputs, or every parameter (outputs included) in parameter order.
        """
        bindings: dict[str, int] = {}
        device = (
            torch.device("cuda") if self.artifact.device_type == "cuda" else torch.device("cpu")
        )
        positions = range(len(self.params)) if len(args) == self._num_params else self._in_pos
        for k, pos in enumerate(positions):
            message = _check_tensor(self.params[pos], args[k], bindings, device)
            if message is not None:
                raise KernelArgumentError(f"{self.func_name}: argument {k} ({message})") from cause


def _no_cuda_runtime(name: str, exc: Exception) -> Any:
    message = (
        f"kernel {name} was compiled for CUDA but this process has no CUDA runtime "
        f"(TVM: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); its sources are "
        f"available through get_kernel_source(), running it needs a GPU"
    )

    def unavailable(*args: Any) -> Any:
        raise TileautoError(message)

    return unavailable


def _bound_size(args: tuple, source: tuple[int, int]) -> int:
    """The size a variable takes: an input's dim, or a scalar argument's value (dim -1)."""
    k, d = source
    return int(args[k]) if d < 0 else args[k].shape[d]


def _check_scalar(spec: ParamSpec, value: Any) -> str | None:
    """Why ``value`` cannot be the scalar parameter ``spec``, or None."""
    import numbers

    kind = "int" if spec.dtype.startswith(("int", "uint")) else "number"
    if spec.dtype == "bool":
        ok = isinstance(value, (bool, numbers.Integral))
    elif kind == "int":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    else:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok:
        return None
    return (
        f"parameter {spec.name!r}: expected a scalar {spec.dtype} (a Python {kind}), "
        f"got {type(value).__name__}"
    )


def _check_tensor(
    spec: ParamSpec, value: Any, bindings: dict[str, int], device: torch.device
) -> str | None:
    if spec.scalar:
        message = _check_scalar(spec, value)
        if message is None and spec.dtype.startswith(("int", "uint")):
            bindings.setdefault(spec.size_var, int(value))  # a length binds its size variable
        return message
    name = spec.name
    expected = f"expected a {list(spec.display_shape)} {spec.dtype} tensor on {device.type}"
    if not isinstance(value, torch.Tensor):
        return f"parameter {name!r}: {expected}, got {type(value).__name__}"
    got = f"got {list(value.shape)} {str(value.dtype).replace('torch.', '')} on {value.device.type}"
    if value.dtype != torch_dtype(spec.dtype):
        return f"parameter {name!r}: wrong dtype: {expected}, {got}"
    if value.device.type != device.type:
        return f"parameter {name!r}: wrong device: {expected}, {got}"
    if value.dim() != len(spec.shape):
        return f"parameter {name!r}: wrong number of dimensions: {expected}, {got}"
    for d, dim in enumerate(spec.shape):
        size = int(value.shape[d])
        if isinstance(dim, int):
            if size != dim:
                return f"parameter {name!r}: wrong shape at dim {d}: {expected}, {got}"
        elif dim.isidentifier():
            if bindings.setdefault(dim, size) != size:
                var = spec.display_shape[d]
                return (
                    f"parameter {name!r}: dim {d} is {var}={size} but an earlier argument "
                    f"bound {var}={bindings[dim]}"
                )
        else:
            try:
                want = evaluate_dim(dim, bindings)
            except (KeyError, ValueError, ZeroDivisionError):
                continue  # a variable no earlier argument binds, or an extent not evaluated
            if size != want:
                return (
                    f"parameter {name!r}: wrong shape at dim {d}, {spec.display_shape[d]} = "
                    f"{want}: {expected}, {got}"
                )
    if not value.is_contiguous():
        return f"parameter {name!r}: the tensor is not contiguous (strides {list(value.stride())}); pass .contiguous()"
    return None
