"""JITKernel: a compiled kernel called with torch tensors, outputs allocated for the caller."""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tileauto.artifact import KernelArtifact, ParamSpec, evaluate_dim
from tileauto.errors import KernelArgumentError, TileautoError
from tileauto.jit import runtime as tvm_runtime  # loads kernels without TVM's compiler
from tileauto.jit._call_plan import CallPlan, ffi_views, install_c_paths
from tileauto.jit._kernel_threads import pool_of, set_kernel_threads
from tileauto.jit.dtypes import torch_dtype
from tileauto.settings import Settings

if TYPE_CHECKING:
    import tvm

# Errors that a call with bad arguments raises inside TVM (or while allocating outputs); they are
# turned into a KernelArgumentError naming the bad argument when one is found.
_ARGUMENT_ERRORS = (TypeError, ValueError, RuntimeError, IndexError, AttributeError)
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


class JITKernel(_KernelCallBase):
    """A compiled kernel. Call it with the input tensors; it returns the outputs.

    Inputs are the parameters not listed in ``out_idx``, in order; outputs are allocated with
    the right shape, dtype and device and returned (one tensor, or a tuple). Called with every
    parameter, outputs included (in parameter order), it writes into the given outputs instead
    and returns them: no allocation, for hot loops that reuse their buffers. Tensors are passed
    without copying (DLPack). Wrong arguments raise :class:`KernelArgumentError`.
    """

    def __init__(
        self,
        artifact: KernelArtifact,
        module: Any = None,
        num_threads: int | None = None,
        lib_path: Path | None = None,
    ) -> None:
        self.artifact = artifact
        self._module = module
        self.num_threads: int | None = None  # set for parallel CPU kernels (use_threads)
        self.thread_pool: str | None = None  # "tileauto" or "tvm", for parallel CPU kernels
        lib = lib_path or artifact.lib_path  # load_library's may have another name
        self._lib_path = Path(lib)  # the library this kernel runs, which export_library copies
        if module is None:
            try:
                self._module = tvm_runtime.load_module(lib, artifact.device_type)
            except Exception as exc:
                if artifact.device_type != "cuda" or tvm_runtime.enabled("cuda"):
                    raise
                # Compiled for CUDA on a machine without the CUDA runtime: sources stay readable.
                self._func = _no_cuda_runtime(artifact.func_name, exc)
        if self._module is not None:
            self._func = self._module[artifact.func_name]
        self.params: tuple[ParamSpec, ...] = artifact.params
        plan = CallPlan.make(artifact.params, artifact.out_idx, artifact.device_type)
        self._plan = plan
        self._in_pos, self._out_pos = plan.in_pos, plan.out_pos
        # read by every call: one attribute lookup each (see tileauto.jit._call_plan)
        self._num_in, self._num_params, self._single_out = (
            plan.num_in,
            plan.num_params,
            plan.single_out,
        )
        self._out_template, self._out_like = plan.out_template, plan.out_like
        self._align = plan.align  # a call checks its tensors' data against it
        self._native_out = plan.native_output_call(self._func)
        # integer scalars, which TVM wraps to their dtype silently: checked on every call (the
        # C slot sends one that is out of range, or not an int, to the Python path, which names it)
        self._int_scalars = tuple(
            (pos, plan.in_pos.index(pos), *bounds)
            for pos, p in enumerate(artifact.params)
            if p.scalar and (bounds := _int_bounds(p.dtype)) is not None
        )
        if _C_CALL and _set_int_ranges(self):
            install_c_paths(self, plan, self._func, self._native_out, _ARGUMENT_ERRORS)
        self._target: Any = None
        self.origin: tuple | None = None  # (JITImpl, args, kwargs) when made by a @jit factory
        if artifact.device_type == "cpu" and self._module is not None:
            self.thread_pool = pool_of(lib)  # after TVM's loader, as it must be
            if self.thread_pool is not None:
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
        return set_kernel_threads(self.thread_pool, wanted, self.func_name)

    @property
    def config(self) -> dict[str, Any]:
        """The tunable arguments this kernel was built with (a tuned kernel: the tuned ones; a
        tunable its call fixed is the call's argument, not the config's)."""
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

        Load it back, in this or another process, with :meth:`load_library`. Each file is
        written beside its destination and renamed into place: a process that has the library
        at ``path`` loaded keeps running the old one (writing over a mapped library crashes it).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = self.artifact.to_json()
        meta.pop("directory")
        same = path.exists() and path.samefile(self._lib_path)  # exported where it was loaded
        if not same:
            _replace_with(path, lambda tmp: shutil.copyfile(self._lib_path, tmp))
        text = json.dumps(meta, indent=1, default=str)
        _replace_with(Path(f"{path}.json"), lambda tmp: Path(tmp).write_text(text))
        return path

    @classmethod
    def load_library(cls, path: str | Path) -> JITKernel:
        """Load a kernel written by :meth:`export_library` (no compiler needed)."""
        path = Path(path)
        meta_path = Path(f"{path}.json")
        if not meta_path.is_file():
            hint = ""
            if (path.parent / KernelArtifact.META).is_file():  # a cache entry's kernel folder
                hint = (
                    f"; {path.parent} is a cache entry's kernel folder (its description is "
                    f"{KernelArtifact.META}): load the entry with "
                    "AutotuneResult.load_from_disk, or export the kernel first"
                )
            raise FileNotFoundError(
                f"{meta_path} is missing: export_library writes it next to the library{hint}"
            )
        meta = json.loads(meta_path.read_text())
        artifact = KernelArtifact.from_json(meta, directory=path.parent)
        return cls(artifact, lib_path=path)

    def _call_python(self, *args: Any) -> Any:
        # The call (``__call__``; with the C call slot, what it does not serve itself). Fast
        # paths (see tileauto.jit._call_plan): every buffer given (destination passing), where TVM's
        # own checks are the only checks; one output after the inputs (static, or shaped like
        # an input), allocated in C++ by the native caller; and one output after the inputs,
        # allocated from a template or like an input. Everything else, a wrong argument count
        # included, takes the general path.
        if self._align > 1 and _misaligned(args, self._align):
            if len(args) in (self._num_in, self._num_params):  # else: the count's error below
                self._raise_argument_error(args, None)  # unless each buffer assumes less
        if self._int_scalars and _out_of_range(self, args):
            self._raise_argument_error(args, None)
        if len(args) == self._num_params:
            try:
                self._func(*args)
            except _ARGUMENT_ERRORS as exc:
                self._raise_argument_error(args, exc)
                fixed = _compact_empty(args)
                if fixed is None:
                    raise
                return self._call_compacted(args, fixed)
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
                fixed = _compact_empty(args)
                if fixed is None:
                    raise
                return self._call_compacted(args, fixed)
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
                fixed = _compact_empty(args)
                if fixed is None:
                    raise
                return self._call_compacted(args, fixed)
            return out
        return self._call(args)

    if _C_CALL:

        def _fast_failed(self, args: tuple, exc: BaseException) -> Any:
            """The C call slot's native output caller rejected ``args`` (``exc``, the kernel's
            own check, before it ran): raise the KernelArgumentError that names the argument,
            return the call's result where only an empty tensor's strides were refused, or
            return None (the slot then raises ``exc``)."""
            self._raise_argument_error(args, exc)
            fixed = _compact_empty(args)
            return None if fixed is None else self._call_compacted(args, fixed)

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
            outs = self._plan.allocate_outputs(args)
            # A tuple, not a list: ``func(*full)`` then passes it on without building a new one.
            full = tuple(self._plan.interleave(args, outs))
        else:
            raise KernelArgumentError(self._count_message(len(args)))
        func = self._func
        result = outs[0] if len(outs) == 1 else (tuple(outs) if outs else None)
        full = _compact_empty(full) or full  # as a call does: TVM checks an empty one's strides
        if self.artifact.device_type == "cpu":
            full = ffi_views(full)

        def call() -> Any:
            func(*full)
            return result

        return call

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {list(p.shape)} {p.dtype}" for p in self.params)
        return f"JITKernel({self.func_name}({sig}), out_idx={list(self._out_pos)}, config={self.config})"

    # A kernel never changes once loaded: a copy is the kernel itself (``copy.deepcopy`` of a
    # model that holds one, say); pickling it would need its library, which a pickle does not
    # carry.
    def __copy__(self) -> JITKernel:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> JITKernel:
        return self

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a JITKernel ({self.func_name}, config {self.config}) cannot be pickled: it holds a "
            "loaded shared library. Ship it with kernel.export_library(path) and "
            "JITKernel.load_library(path), or a tuning's result with save_to_disk and "
            "load_from_disk; or pickle the factory and its arguments, and call it again there "
            "(the disk cache then loads the kernel)"
        )

    # -- internals -------------------------------------------------------------------------
    def _call_compacted(self, args: tuple, fixed: tuple) -> Any:
        """The call again with ``fixed``: ``args`` with each empty tensor given the compact
        strides TVM checks (torch gives an empty tensor strides of its own, e.g. (1, 1) for
        (3, 0), and any strides describe an empty tensor). Outputs given are returned as given."""
        if len(args) == self._num_params:  # destination passing: the caller's own outputs
            self._func(*fixed)
            single = self._single_out
            if single is not None:
                return args[single]
            return tuple(args[p] for p in self._out_pos)
        if len(args) != self._num_in:
            raise KernelArgumentError(self._count_message(len(args)))
        outs = self._plan.allocate_outputs(fixed)  # empty ones too, given compact strides
        given = _compact_empty(tuple(outs)) or tuple(outs)
        self._func(*self._plan.interleave(fixed, given))
        return outs[0] if len(outs) == 1 else (tuple(outs) if outs else None)

    def _call(self, args: tuple) -> Any:
        """The general call: any argument count (the error), outputs anywhere, symbolic shapes."""
        if len(args) != self._num_in:
            raise KernelArgumentError(self._count_message(len(args)))
        try:
            outs = self._plan.allocate_outputs(args)
            if self._plan.trailing_outs:
                self._func(*args, *outs)
            else:
                self._func(*self._plan.interleave(args, outs))
        except _ARGUMENT_ERRORS as exc:
            self._raise_argument_error(args, exc)
            fixed = _compact_empty(args)
            if fixed is None:
                raise
            return self._call_compacted(args, fixed)
        return outs[0] if len(outs) == 1 else (tuple(outs) if outs else None)

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
        lengths = {sym for p in self.params if not p.scalar for sym in p.symbols}
        for k, pos in enumerate(positions):
            spec = self.params[pos]
            message = _check_tensor(spec, args[k], bindings, device, lengths)
            if message is not None:
                error = KernelArgumentError(f"{self.func_name}: argument {k} ({message})")
                # for a caller that names the argument its own way (a torch_op): which one,
                # and what is wrong with it
                error.argument_index = k  # type: ignore[attr-defined]
                prefix = f"parameter {spec.name!r}: "
                error.argument_detail = (  # type: ignore[attr-defined]
                    message[len(prefix) :] if message.startswith(prefix) else message
                )
                raise error from cause
        if len(args) == self._num_in:
            self._check_output_extents(args, bindings, cause)

    def _check_output_extents(
        self, args: tuple, bindings: dict[str, int], cause: BaseException | None
    ) -> None:
        """Raise a KernelArgumentError naming an output whose extent, an expression of the
        inputs' sizes (``n - 4``, ``2 * n`` of a scalar ``n``), comes out negative."""
        try:
            shapes = self._plan.resolve_out_shapes(args)
        except Exception:  # noqa: BLE001 - an extent not evaluated here: the call's own error
            return
        for pos, shape in zip(self._out_pos, shapes):
            if any(int(d) < 0 for d in shape):
                spec = self.params[pos]
                given = ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))
                raise KernelArgumentError(
                    f"{self.func_name}: output {spec.name!r} of shape "
                    f"{list(spec.display_shape)} would be {list(shape)} for these inputs "
                    f"({given}): an extent cannot be negative"
                ) from cause


def _replace_with(path: Path, write: Callable[[str], Any]) -> None:
    """Write ``path`` through a new file beside it (the umask's mode), renamed into place."""
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _no_cuda_runtime(name: str, exc: Exception) -> Any:
    message = (
        f"kernel {name} was compiled for CUDA but this process has no CUDA runtime "
        f"(TVM: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); its sources are "
        f"available through get_kernel_source(), running it needs a GPU"
    )

    def unavailable(*args: Any) -> Any:
        raise TileautoError(message)

    return unavailable


def _compact_empty(args: tuple) -> tuple | None:
    """``args`` with each empty tensor whose strides are not the compact ones that TVM
    checks given those (a view: no storage is touched); None when there is none."""
    fixed, changed = list(args), False
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.numel() == 0 and a.dim() >= 1:
            compact, step = [], 1
            for size in reversed(a.shape):
                compact.append(step)
                step *= int(size)
            compact.reverse()
            if list(a.stride()) != compact:
                fixed[i] = a.as_strided(a.shape, compact)
                changed = True
    return tuple(fixed) if changed else None


def _misaligned(args: tuple, align: int) -> bool:
    """Whether a tensor among ``args`` (or another array: a numpy one, through DLPack) has data
    that is not ``align``-byte aligned."""
    for a in args:
        view = a if isinstance(a, torch.Tensor) else _array_view(a)
        if view is not None and view.data_ptr() % align:
            return True
    return False


def _array_view(value: Any) -> torch.Tensor | None:
    """A torch view of an array that is not a torch tensor (numpy's, any DLPack exporter), for
    its checks; None for a scalar, or what torch cannot view."""
    if isinstance(value, (numbers.Number, str, bytes)) or not hasattr(value, "__dlpack__"):
        return None
    try:
        return torch.from_dlpack(value)
    except Exception:  # noqa: BLE001 - not an array torch takes: TVM's own check follows
        return None


def _check_scalar(spec: ParamSpec, value: Any) -> str | None:
    """Why ``value`` cannot be the scalar parameter ``spec``, or None."""
    kind = "int" if spec.dtype.startswith(("int", "uint")) else "number"
    if spec.dtype == "bool":
        kind = "bool"
        ok = isinstance(value, (bool, numbers.Integral))  # not numpy.bool_: TVM refuses it
    elif kind == "int":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    else:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok:
        what = type(value)
        name = (
            what.__name__ if what.__module__ == "builtins" else f"{what.__module__}.{what.__name__}"
        )
        return (
            f"parameter {spec.name!r}: expected a scalar {spec.dtype} (a Python {kind}), got {name}"
        )
    if (
        kind == "number"
        and isinstance(value, numbers.Integral)
        and not _INT64[0] <= int(value) <= _INT64[1]
    ):
        return (
            f"parameter {spec.name!r}: a scalar {spec.dtype} was given the int {int(value)}, "
            "beyond int64 (TVM passes a Python int as an int64): pass float(value)"
        )
    bounds = _int_bounds(spec.dtype)
    if bounds is not None and not bounds[0] <= int(value) <= bounds[1]:
        if spec.dtype == "uint64":  # TVM passes every integer scalar as an int64
            return (
                f"parameter {spec.name!r}: a scalar uint64 takes {bounds[0]} to {bounds[1]} "
                f"here (TVM passes it as an int64), got {int(value)}"
            )
        return (
            f"parameter {spec.name!r}: a scalar {spec.dtype} holds {bounds[0]} to "
            f"{bounds[1]}, got {int(value)} (TVM would wrap it)"
        )
    return None


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _out_of_range(kernel: JITKernel, args: tuple) -> bool:
    """Whether an integer scalar among ``args`` (inputs, or every parameter) is outside its
    dtype, or a bool (TVM would take True as 1: a flag passed in the wrong place); a wrong
    count or another type is left to the call's own errors."""
    full = len(args) == kernel._num_params
    if not full and len(args) != kernel._num_in:
        return False
    for pos, in_pos, low, high in kernel._int_scalars:
        value = args[pos if full else in_pos]
        if isinstance(value, bool):
            return True
        if type(value) is int or isinstance(value, numbers.Integral):
            if not low <= int(value) <= high:
                return True
    return False


def _set_int_ranges(kernel: JITKernel) -> bool:
    """Give the C call slot the kernel's integer scalars to range-check; False when it cannot
    take them all (then every call takes the Python path, which checks them)."""
    if not kernel._int_scalars:
        return True
    try:
        kernel._set_int_ranges(kernel._int_scalars, kernel._num_in, kernel._num_params)
    except ValueError:  # more integer scalars than the C slot holds
        return False
    return True


def _int_bounds(dtype: str) -> tuple[int, int] | None:
    """The values an integer scalar of ``dtype`` takes, or None for other dtypes: those the
    dtype holds, and for uint64 those TVM can pass (as an int64: up to 2**63 - 1)."""
    signed = dtype.startswith("int")
    if not (signed or dtype.startswith("uint")):
        return None
    bits = int(dtype[3 if signed else 4 :] or 32)
    if signed:
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return (0, min((1 << bits) - 1, _INT64[1]))


def _check_tensor(
    spec: ParamSpec,
    value: Any,
    bindings: dict[str, int],
    device: torch.device,
    lengths: set[str] | frozenset[str] = frozenset(),
) -> str | None:
    """Why ``value`` cannot be the parameter ``spec``, or None; ``lengths``: the size variables
    that are a buffer's dimension (a scalar that is one is a length, never negative)."""
    if spec.scalar:
        message = _check_scalar(spec, value)
        if message is None and spec.size_var in lengths and int(value) < 0:
            return f"parameter {spec.name!r}: a length (a buffer's dimension), got {int(value)}"
        if message is None and spec.dtype.startswith(("int", "uint")):
            bound = bindings.setdefault(spec.size_var, int(value))  # a length binds its size
            if bound != int(value):
                return (
                    f"parameter {spec.name!r}: the scalar {spec.size_var}={int(value)} but an "
                    f"earlier argument bound {spec.size_var}={bound}"
                )
        return message
    name = spec.name
    expected = f"expected a {list(spec.display_shape)} {spec.dtype} tensor on {device.type}"
    given = value
    if not isinstance(value, torch.Tensor):
        value = _array_view(value)  # a numpy array is taken as torch would view it
        if value is None:
            return f"parameter {name!r}: {expected}, got {type(given).__name__}"
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
    if spec.align > 1 and value.numel() and value.data_ptr() % spec.align:
        if given is not value:
            return (
                f"parameter {name!r}: the {type(given).__name__}'s data is not {spec.align}-byte "
                "aligned (numpy aligns its arrays to 16 bytes), which the compiled kernel "
                "assumes (a misaligned call would crash the process); pass a torch tensor, "
                "such as torch.from_numpy(a).clone()"
            )
        return (
            f"parameter {name!r}: its data is not {spec.align}-byte aligned (a view starting "
            f"{value.storage_offset()} elements into its storage, such as x[1:]), which the "
            "compiled kernel assumes (a misaligned call would crash the process); pass .clone()"
        )
    return None
