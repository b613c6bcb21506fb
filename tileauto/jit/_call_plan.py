"""A JITKernel's call plan: what a call needs, worked out once when the kernel loads.

A call costs a few hundred nanoseconds of Python around the kernel, and on tiny tensors that
is the whole cost, so the usual case (one output after the inputs, static or shaped like an
input, on the CPU) gets paths that plan nothing per call, cheapest first:

- the direct call of ``src/kernel_call.c``: the compiled function called from C with the
  torch tensors as DLTensor views (no FFI tensor objects), where torch exports its DLPack C
  exchange API;
- the native output caller (``src/caller.cc``): the output allocated in C++ with the
  arguments' allocator, inside one call that also runs the kernel;
- ``torch.empty_like`` of a template made here (the cheapest allocation torch offers from
  Python), for outputs up to ``TEMPLATE_MAX_BYTES``.

Everything else (outputs anywhere, symbolic shapes) takes the general path of
:meth:`CallPlan.allocate_outputs`. ``docs/performance.md`` ("jit") has the measured costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tileauto.artifact import ParamSpec, evaluate_dim
from tileauto.errors import KernelArgumentError
from tileauto.jit.dtypes import torch_dtype

TEMPLATE_MAX_BYTES = 64 * 1024  # larger outputs get no template: templates hold memory
_empty_like = torch.empty_like


@dataclass(frozen=True)
class CallPlan:
    """How one kernel's parameters split into inputs and outputs, and how outputs are made.

    ``num_params`` is the argument count of destination passing (every buffer given), -1 for
    a kernel without outputs (its one form is the usual call). ``out_dims`` holds, per output
    dim, an int, the (input, dim) that binds its size variable, or an expression over them.
    """

    params: tuple[ParamSpec, ...]
    device_type: str
    in_pos: tuple[int, ...]
    out_pos: tuple[int, ...]
    out_dtypes: tuple[torch.dtype, ...]
    bind_sources: dict[str, tuple[int, int]]
    num_in: int
    num_params: int
    single_out: int | None
    trailing_outs: bool  # outputs after all inputs: func(*inputs, *outputs)
    out_device: torch.device | None  # None: a GPU kernel's outputs go where its inputs are
    out_shapes: tuple[tuple[int, ...], ...] | None  # when every output shape is static
    out_templates: tuple[torch.Tensor, ...] | None
    out_template: torch.Tensor | None  # the one trailing output's template
    out_like: int | None  # the input the one trailing output is shaped like
    native_dtype: str | None  # the dtype of the one output k(*inputs) allocates in C/C++
    out_dims: tuple[tuple[Any, ...], ...]

    @property
    def align(self) -> int:
        """The most any buffer assumes of its data's byte alignment (0: no buffer)."""
        return max((p.align for p in self.params if not p.scalar), default=0)

    @classmethod
    def make(
        cls, params: tuple[ParamSpec, ...], out_idx: Sequence[int], device_type: str
    ) -> CallPlan:
        """The plan of a kernel with these parameters and outputs, on ``device_type``.

        Raises:
            KernelArgumentError: an output has a size no input binds, or a dtype torch lacks.
        """
        outs = set(out_idx)
        in_pos = tuple(i for i in range(len(params)) if i not in outs)
        out_pos = tuple(sorted(outs))
        num_in = len(in_pos)
        sources = symbol_sources(params, in_pos)
        _check_outputs_resolvable(params, out_pos, sources)
        out_dtypes = tuple(torch_dtype(params[i].dtype) for i in out_pos)
        out_device = torch.device("cpu") if device_type == "cpu" else None
        out_shapes = templates = None
        if all(params[i].static_shape is not None for i in out_pos):
            out_shapes = tuple(
                shape for p in out_pos if (shape := params[p].static_shape) is not None
            )
            if out_device is not None and all(
                math.prod(shape) * dtype.itemsize <= TEMPLATE_MAX_BYTES
                for shape, dtype in zip(out_shapes, out_dtypes)
            ):
                templates = tuple(
                    torch.empty(shape, dtype=dtype, device=out_device)
                    for shape, dtype in zip(out_shapes, out_dtypes)
                )
        trailing = out_pos == tuple(range(num_in, len(params)))
        template = like = native_dtype = None
        if len(out_pos) == 1 and trailing:
            if templates is not None:
                template = templates[0]
            else:
                like = _input_like(params, in_pos, out_pos[0])
            if device_type == "cpu" and (out_shapes is not None or like is not None):
                native_dtype = params[out_pos[0]].dtype
        return cls(
            params=params,
            device_type=device_type,
            in_pos=in_pos,
            out_pos=out_pos,
            out_dtypes=out_dtypes,
            bind_sources=sources,
            num_in=num_in,
            num_params=len(params) if out_pos else -1,
            single_out=out_pos[0] if len(out_pos) == 1 else None,
            trailing_outs=trailing,
            out_device=out_device,
            out_shapes=out_shapes,
            out_templates=templates,
            out_template=template,
            out_like=like,
            native_dtype=native_dtype,
            out_dims=tuple(
                tuple(
                    dim if isinstance(dim, int) else sources.get(dim, dim)
                    for dim in params[p].shape
                )
                for p in out_pos
            ),
        )

    def native_output_call(self, func: Any) -> Callable[..., Any] | None:
        """The native caller of ``func`` that allocates the one output (None: not here)."""
        if self.native_dtype is None:
            return None
        return _native_output_call(
            func,
            None if self.out_shapes is None else self.out_shapes[0],
            self.native_dtype,
            self.out_like,
        )

    def interleave(self, args: Sequence[Any], outs: Sequence[Any]) -> list:
        """Every parameter in order, from the inputs and the outputs."""
        full: list = [None] * len(self.params)
        for pos, value in zip(self.in_pos, args):
            full[pos] = value
        for pos, value in zip(self.out_pos, outs):
            full[pos] = value
        return full

    def allocate_outputs(self, args: Sequence[Any]) -> list:
        """Fresh outputs for a call with these inputs."""
        if not self.out_pos:
            return []
        if self.out_templates is not None:
            return [_empty_like(t) for t in self.out_templates]
        device = self.out_device
        if device is None:  # a GPU kernel: the outputs go where the inputs are
            device = next(
                (a.device for a in args if isinstance(a, torch.Tensor)),
                torch.device(self.device_type),
            )
        shapes: Sequence[tuple[int, ...]] | None = self.out_shapes
        if shapes is None:
            shapes = self.resolve_out_shapes(args)
        return [
            torch.empty(shape, dtype=dtype, device=device)
            for shape, dtype in zip(shapes, self.out_dtypes)
        ]

    def resolve_out_shapes(self, args: Sequence[Any]) -> list[tuple[int, ...]]:
        """The output shapes for these inputs (a size variable alone is read off its input)."""
        bindings: dict[str, int] | None = None
        shapes = []
        for dims in self.out_dims:
            shape = []
            for dim in dims:
                if isinstance(dim, int):
                    shape.append(dim)
                elif isinstance(dim, tuple):
                    shape.append(_bound_size(args, dim))
                else:
                    if bindings is None:
                        bindings = {
                            s: _bound_size(args, source) for s, source in self.bind_sources.items()
                        }
                    shape.append(evaluate_dim(dim, bindings))
            shapes.append(tuple(shape))
        return shapes


def symbol_sources(
    params: Sequence[ParamSpec], in_pos: Sequence[int]
) -> dict[str, tuple[int, int]]:
    """For each size variable (by key), the (input index, dim) that binds it (dim -1: the
    input is a scalar argument that is the variable, such as a length ``n: T.int32``)."""
    sources: dict[str, tuple[int, int]] = {}
    for k, pos in enumerate(in_pos):
        if params[pos].scalar:
            sources.setdefault(params[pos].size_var, (k, -1))
            continue
        for d, dim in enumerate(params[pos].shape):
            if isinstance(dim, str) and dim.isidentifier() and dim not in sources:
                sources[dim] = (k, d)
    return sources


def install_c_paths(
    kernel: Any,
    plan: CallPlan,
    func: Any,
    native_out: Callable[..., Any] | None,
    argument_errors: tuple[type[BaseException], ...],
) -> None:
    """Give the kernel's C call slot (``src/kernel_call.c``) its paths: the native output
    caller for ``k(*inputs)``, the compiled function for ``k(*every_buffer)`` with one
    output, and before either, for small CPU calls, the direct call."""
    if not _set_alignment(kernel, plan):
        return  # no C path can check what the kernel assumes: every call takes the Python one
    kernel._set_fast_call(native_out, plan.num_in, argument_errors)
    if plan.single_out is not None and plan.num_params > 0:
        kernel._set_dest_call(func, plan.num_params, plan.single_out)
    if plan.device_type == "cpu" and (plan.native_dtype is not None or plan.single_out is not None):
        native = plan.native_dtype is not None
        _set_direct_call(
            kernel,
            func,
            plan.out_shapes if native else None,
            plan.out_like if native else None,
            plan.native_dtype,
        )


def _set_alignment(kernel: Any, plan: CallPlan) -> bool:
    """Have the C call slot send a call with a tensor whose data is not aligned as the kernel
    assumes (TVM: 64 bytes) to the Python path, which names it: the compiled code's aligned
    loads would crash the process. False when the C slot cannot read a tensor's data pointer
    (torch without the DLPack C exchange API)."""
    align = plan.align
    if align <= 1:
        return True
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if api is None:
        return False
    try:
        kernel._set_alignment(align, torch.Tensor, api)
    except (TypeError, ValueError):
        return False
    return True


def ffi_views(args: tuple) -> tuple:
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


def _check_outputs_resolvable(
    params: Sequence[ParamSpec], out_pos: Sequence[int], sources: dict[str, tuple[int, int]]
) -> None:
    for pos in out_pos:
        try:
            params[pos].resolve_shape({s: 1 for s in sources})
        except KeyError as exc:
            name = dict(params[pos].renamed).get(exc.args[0], exc.args[0])
            raise KernelArgumentError(
                f"output {params[pos].name} has a dimension {name!r} that no input binds: "
                f"tileauto cannot allocate it; make it an input (drop it from out_idx)"
            ) from None


def _input_like(params: Sequence[ParamSpec], in_pos: Sequence[int], out: int) -> int | None:
    """The first input with the output's exact shape and dtype (then the output is allocated
    like it, whatever the sizes its size variables take), or None."""
    spec = params[out]
    for k, pos in enumerate(in_pos):
        other = params[pos]
        if (
            not other.scalar
            and other.dtype == spec.dtype
            and tuple(other.shape) == tuple(spec.shape)
        ):
            return k
    return None


def _bound_size(args: Sequence[Any], source: tuple[int, int]) -> int:
    """The size a variable takes: an input's dim, or a scalar argument's value (dim -1)."""
    k, d = source
    return int(args[k]) if d < 0 else args[k].shape[d]


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
    DLTensor views (``direct_call`` in ``src/kernel_call.c``), where torch exports its DLPack
    C exchange API; k(*inputs) allocates the one output of ``out_shapes[0]`` or shaped like
    ``inputs[like]``, of ``dtype``."""
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
