"""Where tuning inputs come from: captured tensors, a supply program, or seeded generators."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
import math
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tileauto.artifact import ParamSpec
from tileauto.errors import InputSupplyError
from tileauto.jit.dtypes import torch_dtype
from tileauto.options import TensorSupplyType

_CAPTURED: contextvars.ContextVar[tuple[Any, ...] | None] = contextvars.ContextVar(
    "tileauto_autotune_inputs", default=None
)

# The blocks open in every thread, for tunings on threads that have none of their own (a
# ThreadPoolExecutor does not copy the context): block number -> (opening thread, inputs).
_OPEN: dict[int, tuple[int, tuple[Any, ...]]] = {}
_OPEN_LOCK = threading.Lock()
_BLOCK_NUMBERS = itertools.count()


@contextlib.contextmanager
def set_autotune_inputs(*tensors: Any) -> Iterator[None]:
    """Tune every kernel in this block with these tensors.

    Pass the kernel's input tensors in order (outputs may be included too; they are ignored
    except as shape hints). Tuning works on copies: these tensors are never modified.
    ``set_autotune_inputs([a, b])`` and ``set_autotune_inputs(a, b)`` are the same.

    The block applies to tunings started in this thread (and in contexts copied from it),
    and, while it is open, to tunings started in threads that have no block of their own,
    as long as no other thread has one open too (see :func:`captured_inputs`).

    Raises:
        InputSupplyError: an argument is not a tensor or a number, or a tensor without data
            (a meta tensor) or not strided (a sparse one), named by its position.
    """
    with _inputs_block(tensors, shared=True):
        yield


@contextlib.contextmanager
def inputs_of_this_thread(*tensors: Any) -> Iterator[None]:
    """:func:`set_autotune_inputs` for the tunings of this thread (and of contexts copied from
    it) alone: a tuning another thread starts meanwhile does not see them (a torch_op tuning
    on its own arguments, which no other tuning must take)."""
    with _inputs_block(tensors, shared=False):
        yield


@contextlib.contextmanager
def _inputs_block(tensors: tuple[Any, ...], shared: bool) -> Iterator[None]:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    for i, t in enumerate(tensors):
        if not isinstance(t, (torch.Tensor, bool, int, float)):
            raise InputSupplyError(
                f"set_autotune_inputs: argument {i} must be a torch.Tensor (or an int or float "
                f"for a scalar parameter), got {type(t).__name__}"
            )
        if isinstance(t, torch.Tensor):
            _check_has_data(t, f"set_autotune_inputs: argument {i}")
    token = _CAPTURED.set(tuple(tensors))
    number = next(_BLOCK_NUMBERS)
    if shared:
        with _OPEN_LOCK:
            _OPEN[number] = (threading.get_ident(), tuple(tensors))
    try:
        yield
    finally:
        if shared:
            with _OPEN_LOCK:
                del _OPEN[number]
        _CAPTURED.reset(token)


def captured_inputs() -> tuple[Any, ...] | None:
    """The tensors of the innermost ``set_autotune_inputs`` block, if any.

    The block of this thread's context comes first. A thread without one (a pool thread
    tuning for the thread that opened the block) gets the innermost block open in another
    thread, if one thread only has blocks open; when several have, which one applies cannot be
    told: a warning says so and the tuning makes its own inputs.
    """
    own = _CAPTURED.get()
    if own is not None:
        return own
    me = threading.get_ident()
    with _OPEN_LOCK:
        others = [(n, thread, given) for n, (thread, given) in _OPEN.items() if thread != me]
    if not others:
        return None
    if len({thread for _, thread, _ in others}) > 1:
        warnings.warn(
            f"set_autotune_inputs blocks are open in {len({t for _, t, _ in others})} other "
            "threads and none in this one: the tuning cannot tell whose inputs are meant and "
            "makes its own (supply_prog or generators); open the block in the thread that "
            "tunes, or run the tuning in contextvars.copy_context() of the thread that opened it",
            UserWarning,
            stacklevel=2,
        )
        return None
    return max(others, key=lambda item: item[0])[2]  # that thread's innermost block


def _check_has_data(t: torch.Tensor, what: str) -> None:
    """A tensor the tuning can copy: one with data (not on the meta device), strided (not
    sparse). Refused here, naming it, rather than by torch after every config compiled."""
    if t.is_meta:
        raise InputSupplyError(
            f"{what} is a meta tensor, which holds no data to tune on: pass a tensor with data "
            "(on the CPU or the target's device)"
        )
    if t.layout != torch.strided:
        raise InputSupplyError(
            f"{what} has the layout {t.layout}; kernels take dense (strided) tensors: pass "
            "t.to_dense()"
        )


def generate(
    spec: ParamSpec, supply: TensorSupplyType, generator: torch.Generator, device: str
) -> torch.Tensor:
    """One seeded input tensor for a static-shaped parameter."""
    shape = spec.static_shape
    if shape is None:
        raise InputSupplyError(
            f"parameter {spec.name!r} has symbolic shape {list(spec.display_shape)}: generated "
            "inputs need "
            f"static shapes; supply concrete tensors with `with tileauto.set_autotune_inputs(...)` "
            f"or set_profile_args(supply_prog=...)"
        )
    dtype = torch_dtype(spec.dtype)
    is_float = dtype.is_floating_point
    if supply is TensorSupplyType.Zero:
        t = torch.zeros(shape, dtype=dtype)
    elif supply is TensorSupplyType.One:
        t = torch.ones(shape, dtype=dtype)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=generator).bool()
    elif supply is TensorSupplyType.Integer or not is_float:  # real-valued draws truncate to 0
        low, high = (0, 4) if not dtype.is_signed else (-2, 3)
        t = torch.randint(low, high, shape, generator=generator).to(dtype)
    elif supply is TensorSupplyType.Uniform:
        t = (torch.rand(shape, generator=generator) * 2 - 1).to(dtype)
    else:  # Auto for floats, Normal, Randn
        t = torch.randn(shape, generator=generator).to(dtype)
    return t.to(device)


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter as ``supply_prog`` sees it, like TileLang's ``KernelParam``.

    ``torch.randn(p.shape, dtype=p.dtype)`` makes a fitting tensor when the shape is static.

    Attributes:
        name: the parameter's name in the PrimFunc.
        dtype: its ``torch.dtype``.
        shape: a tuple of ints; a symbolic dimension is a string over the size variables'
            keys: a variable's name, except that distinct variables sharing a name are told
            apart as TVMScript prints them (``n``, ``n_1``; TileLang's records hold the
            variables themselves).
        is_output: whether the kernel allocates and returns it (``out_idx``).
        is_scalar: an int or float passed by value (``shape`` is then ``()``).
        size_names: the name of each size variable in ``shape``, by its key (for display).
    """

    name: str
    dtype: torch.dtype
    shape: tuple[int | str, ...]
    is_output: bool = False
    is_scalar: bool = False
    size_names: dict[str, str] = field(default_factory=dict)


def kernel_params(params: Sequence[ParamSpec], in_pos: Sequence[int]) -> list[KernelParam]:
    """Records for every parameter, in call order (outputs are those not in ``in_pos``)."""
    inputs = set(in_pos)
    return [
        KernelParam(
            p.name,
            torch_dtype(p.dtype),
            tuple(p.shape),
            is_output=i not in inputs,
            is_scalar=p.scalar,
            size_names=p.size_names(),
        )
        for i, p in enumerate(params)
    ]


def wants_outputs(supply_prog: Callable[..., Any]) -> bool:
    """A ``supply_prog`` with a ``with_output`` parameter is given the outputs' records too."""
    try:
        return "with_output" in inspect.signature(supply_prog).parameters
    except (TypeError, ValueError):
        return False


def call_supply_prog(
    supply_prog: Callable[..., Any], params: Sequence[ParamSpec], in_pos: Sequence[int]
) -> Any:
    """Call ``supply_prog`` as TileLang does: with the inputs' records, unless it asks for all."""
    records = kernel_params(params, in_pos)
    if wants_outputs(supply_prog):
        return supply_prog(records, with_output=True)
    return supply_prog([r for r in records if not r.is_output])


def make_inputs(
    params: Sequence[ParamSpec],
    in_pos: Sequence[int],
    *,
    captured: Sequence[Any] | None,
    supply_prog: Callable[..., Any] | None,
    supply_type: TensorSupplyType | None,
    seed: int,
    device: str,
) -> list[torch.Tensor]:
    """Inputs for the parameters at ``in_pos``, by priority: captured, supply_prog, generators.

    Raises:
        InputSupplyError: the supplied tensors do not fit, or shapes are symbolic with no
            concrete inputs.
    """
    if captured is not None:
        return _pick_inputs(list(captured), params, in_pos, "set_autotune_inputs")
    if supply_prog is not None:
        produced = call_supply_prog(supply_prog, params, in_pos)
        if isinstance(produced, torch.Tensor):
            produced = [produced]
        if not isinstance(produced, (list, tuple)):
            raise InputSupplyError(
                f"supply_prog must return a list of tensors, got {type(produced).__name__}"
            )
        return _pick_inputs(list(produced), params, in_pos, "supply_prog")
    supply = supply_type if supply_type is not None else TensorSupplyType.Auto
    if not isinstance(supply, TensorSupplyType):
        raise InputSupplyError(f"supply_type must be a TensorSupplyType, got {supply!r}")
    scalars = [params[p].name for p in in_pos if params[p].scalar]
    if scalars:
        raise InputSupplyError(
            f"the kernel takes the scalar parameter(s) {scalars}, whose values tileauto cannot "
            "invent: pass the inputs with `with tileauto.set_autotune_inputs(...)` (tensors "
            "and the scalars, in order) or return them from set_profile_args(supply_prog=...)"
        )
    generator = torch.Generator().manual_seed(seed)
    return [generate(params[p], supply, generator, device) for p in in_pos]


def _pick_inputs(
    tensors: list[Any], params: Sequence[ParamSpec], in_pos: Sequence[int], source: str
) -> list[torch.Tensor]:
    if len(tensors) == len(params) and len(params) != len(in_pos):
        tensors = [tensors[p] for p in in_pos]
    if len(tensors) != len(in_pos):
        names = [params[p].name for p in in_pos]
        raise InputSupplyError(
            f"{source} gave {len(tensors)} tensors; the kernel takes {len(in_pos)} inputs {names} "
            f"(or all {len(params)} parameters including outputs)"
        )
    sizes: dict[str, tuple[int, str]] = {}  # each size variable's value, and who gave it
    for k, t in enumerate(tensors):  # scalars first: a length passed by value binds its size
        spec = params[in_pos[k]]
        if spec.scalar:
            tensors[k] = _pick_scalar(t, spec, k, source, sizes)
    for k, t in enumerate(tensors):
        spec = params[in_pos[k]]
        if spec.scalar:
            continue
        if not isinstance(t, torch.Tensor):
            raise InputSupplyError(
                f"{source}: input {k} ({spec.name}) is {type(t).__name__}, not a tensor"
            )
        _check_has_data(t, f"{source}: input {k} ({spec.name})")
        _check_fits(t, spec, k, source)
        _check_sizes(t, spec, k, source, sizes)
    return tensors


def _pick_scalar(
    t: Any, spec: ParamSpec, k: int, source: str, sizes: dict[str, tuple[int, str]]
) -> bool | int | float:
    """A scalar input's value, as the kernel takes it: an int for an integer dtype (TVM
    refuses 3.0 there, in every config alike), recorded as the size it binds."""
    if isinstance(t, torch.Tensor) and t.numel() == 1:
        t = t.item()  # a one-element tensor for a scalar: its value
    if not isinstance(t, (bool, int, float)):
        raise InputSupplyError(
            f"{source}: input {k} ({spec.name}) is the scalar parameter {spec.name} "
            f"({spec.dtype}): give an int or float, got {type(t).__name__}"
        )
    _check_scalar(t, spec, k, source)
    if spec.dtype.startswith(("int", "uint")):
        if isinstance(t, float):
            t = int(t)  # a whole number (checked above)
        sizes[spec.size_var] = (int(t), f"input {k} ({spec.name}), passed by value")
    return t


def _check_scalar(value: bool | int | float, spec: ParamSpec, k: int, source: str) -> None:
    """An integer scalar's value must be a whole number its dtype holds: TVM would silently
    wrap ``2**32 + 7`` to 7, or truncate 2.7 to 2, for every config alike."""
    if not spec.dtype.startswith(("int", "uint")):
        return
    if isinstance(value, bool):  # the kernel refuses it (it ran as 1): say so here, once
        raise InputSupplyError(
            f"{source}: input {k} ({spec.name}) is the {spec.dtype} scalar {spec.name}: give "
            f"an int, got the bool {value!r}"
        )
    info = torch.iinfo(torch_dtype(spec.dtype))
    whole = isinstance(value, int) or (math.isfinite(value) and value == int(value))
    if not whole or not info.min <= value <= info.max:
        raise InputSupplyError(
            f"{source}: input {k} ({spec.name}) is the {spec.dtype} scalar {spec.name}: give "
            f"a whole number from {info.min} to {info.max}, got {value!r}"
        )


def _check_sizes(
    t: torch.Tensor, spec: ParamSpec, k: int, source: str, sizes: dict[str, tuple[int, str]]
) -> None:
    """Every tensor sized by one size variable gives it the same value (the kernel refuses the
    call otherwise, for every config alike)."""
    for d, dim in enumerate(spec.shape):
        if not (isinstance(dim, str) and dim.isidentifier()):
            continue
        given = (int(t.shape[d]), f"input {k} ({spec.name}) dimension {d}")
        first = sizes.setdefault(dim, given)
        if first[0] != given[0]:
            name = dict(spec.renamed).get(dim, dim)
            raise InputSupplyError(
                f"{source}: the size {name} is {first[0]} in {first[1]} but {given[0]} in "
                f"{given[1]}; every input that sizes or binds it must agree"
            )


def _check_fits(t: torch.Tensor, spec: ParamSpec, k: int, source: str) -> None:
    """A supplied tensor of the kernel's dtype and static sizes, or an error naming both: it
    would fail every config alike, with only the first line of TVM's message each."""
    want = torch_dtype(spec.dtype)
    problem = None
    if t.dtype != want:
        problem = f"is {t.dtype}, the kernel takes {want}"
    elif len(t.shape) != len(spec.shape) or any(
        isinstance(d, int) and d != n for d, n in zip(spec.shape, t.shape)
    ):
        problem = f"has shape {tuple(t.shape)}, the kernel takes {spec.display_shape}"
    if problem is not None:
        raise InputSupplyError(f"{source}: input {k} ({spec.name}) {problem}")
