"""The op's outputs without running it: shapes, dtypes and devices from the kernel's signature.

A fake (meta) implementation must not compile, tune or run anything, yet it must give the
shapes the real call returns, symbolic sizes included. The signature comes from a kernel
already in the op's memory for this problem, else from elaborating the factory at its default
config (a Python call that builds the PrimFunc; nothing is compiled). Each output dim is then
written in the op's own sizes: a size variable of the signature through the input dim that
binds it, a static extent through the first input dim (or problem value) that has it, so a
symbolic size stays symbolic, and a constant stays a constant.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tileauto.artifact import ParamSpec, evaluate_dim
from tileauto.errors import TorchOpError
from tileauto.jit.dtypes import torch_dtype


@dataclass(frozen=True)
class Signature:
    """A kernel's parameters and which of them it returns (non-negative, sorted)."""

    params: tuple[ParamSpec, ...]
    out_pos: tuple[int, ...]

    @property
    def in_pos(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.params)) if i not in self.out_pos)


def hint(value: Any, *, stand_in: bool = False) -> Any:
    """A SymInt's concrete example value (no guard is added); anything else as it is.

    ``stand_in``: an unbacked size gets a made-up value instead (where only the dtypes of
    the signature are needed: ``out_shapes`` gives the shapes).

    Raises:
        TypeError: an unbacked size (data-dependent, no example value) that a kernel cannot
            be chosen for while tracing.
    """
    if isinstance(value, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import has_guarding_hint, optimization_hint

        if not has_guarding_hint(value):  # optimization_hint would make one up (8192)
            if stand_in:
                return int(optimization_hint(value, fallback=64))
            raise TypeError(
                f"the size {value} has no example value (a data-dependent size), and the op "
                "cannot pick its kernel's signature for it while tracing"
            )
        return int(optimization_hint(value))
    if isinstance(value, (tuple, list)):  # torch.Size included
        return tuple(hint(v, stand_in=stand_in) for v in value)
    if isinstance(value, dict):
        return {k: hint(v, stand_in=stand_in) for k, v in value.items()}
    return value


def scalar_symbols(values: Sequence[Any]) -> set[Any]:
    """The free symbols of the symbolic values among ``values`` (the op's scalar arguments)."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    found: set[Any] = set()
    for value in values:
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            found |= set(free_symbols(value))
    return found


def specialized(value: Any, symbols: set[Any]) -> Any:
    """A problem with each symbolic value that holds one of ``symbols`` (the op's scalar
    arguments) guarded to its example value, as are symbolic floats and bools.

    The factory may branch on such a value (a ``mode`` that chooses the output's dtype or
    length), which no doubling can tell: the guard makes torch trace the op again for another
    value, where reading the example value alone would let one graph serve every value. A
    symbolic tensor size is left symbolic (the fake follows it, see :func:`output_shapes`).

    Raises:
        GuardOnDataDependentSymNode: a data-dependent value (from ``.item()``), which has no
            example value to guard.
    """
    from torch.fx.experimental.symbolic_shapes import (
        free_symbols,
        guard_bool,
        guard_float,
        guard_int,
    )

    if isinstance(value, torch.SymInt):
        return guard_int(value) if set(free_symbols(value)) & symbols else value
    if isinstance(value, torch.SymFloat):
        return guard_float(value)
    if isinstance(value, torch.SymBool):
        return guard_bool(value)
    if isinstance(value, list):
        return [specialized(v, symbols) for v in value]
    if isinstance(value, tuple):  # torch.Size included
        return tuple(specialized(v, symbols) for v in value)
    if isinstance(value, dict):
        return {k: specialized(v, symbols) for k, v in value.items()}
    return value


class SignatureMemo:
    """Signatures by problem, elaborated at most once each (a fake is called at every trace)."""

    def __init__(self, elaborate: Callable[[tuple, dict[str, Any]], Signature]) -> None:
        self._elaborate = elaborate
        self._by_problem: dict[Any, Signature] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, args: tuple, kwargs: dict[str, Any]) -> Signature:
        found = self._by_problem.get(key)
        if found is None:
            with self._lock:
                found = self._by_problem.get(key)
                if found is None:
                    found = self._by_problem[key] = self._elaborate(args, kwargs)
        return found

    def put(self, key: Any, sig: Signature) -> None:
        """Remember a signature known without elaborating (a kernel in memory)."""
        with self._lock:
            self._by_problem.setdefault(key, sig)


def elaborated_signature(
    factory: Callable[..., Any], out_idx: Sequence[int] | None, args: tuple, kwargs: dict[str, Any]
) -> Signature:
    """The signature of ``factory(*args, **kwargs)``: elaborated (a PrimFunc), not compiled."""
    from tileauto.jit.compiler import describe_params, elaborate, resolve_out_idx

    params = describe_params(elaborate(factory, args, kwargs))
    return Signature(
        params, resolve_out_idx(None if out_idx is None else tuple(out_idx), len(params))
    )


def output_shapes(
    sig: Signature,
    kernel_args: Sequence[Any],
    problem_values: Sequence[Any],
    doubled: Signature | None = None,
    doubled_one: Callable[[str], Signature | None] | None = None,
    far: tuple[int, Signature] | None = None,
) -> list[tuple[Any, ...]]:
    """Each output's shape in the sizes of ``kernel_args`` (fake tensors, maybe symbolic).

    ``kernel_args`` are what the kernel is called with (its inputs, in order);
    ``problem_values`` the factory's problem arguments as the op computed them. ``doubled``,
    the signature at the problem with every symbolic value doubled, tells a static extent
    that follows a size (it doubles: written as that size) from a constant (it stays) and
    from one the fake cannot write (anything else: an error). ``doubled_one(symbol)``, the
    signature with that one symbolic value doubled, tells which of several symbolic sizes of
    the same example value (a square example under ``torch.export``) an extent follows.
    ``far``, ``(factor, the signature at factor times every symbolic value)``, catches an
    extent that follows a size only up to a point (``min(n, 16)`` traced at ``n = 4``
    doubles, but is 16 at ``n = 4096``): it must grow by the same factor.

    Raises:
        ValueError: an extent that depends on the symbolic sizes otherwise than as one of
            them (``2 * M`` in a kernel of static shapes), or a shape expression it cannot
            evaluate.
        KeyError: a size variable no input binds.
    """
    by_value: dict[int, Any] = {}  # a static extent -> the op's first size that has it
    # a static extent -> the problem's distinct symbolic sizes that have it: the factory sees
    # the problem alone, so an extent that follows a size follows one of these. Two of them
    # (8x8 @ 8x8 under export's separate M, K, N) and the fake cannot tell which it is.
    symbols: dict[int, dict[str, Any]] = {}
    bindings: dict[str, Any] = {}  # a size variable -> the op's size that binds it
    input_symbols: dict[int, dict[str, Any]] = {}  # as symbols, of the inputs' static dims
    for k, pos in enumerate(sig.in_pos):
        spec, arg = sig.params[pos], kernel_args[k]
        if spec.scalar:
            if spec.dtype.startswith(("int", "uint")):
                bindings.setdefault(spec.size_var, arg)
            continue
        for d, dim in enumerate(spec.shape):
            size = arg.shape[d]
            if isinstance(dim, int):
                by_value.setdefault(dim, size)
                if isinstance(size, torch.SymInt):
                    input_symbols.setdefault(dim, {}).setdefault(str(size), size)
            elif dim.isidentifier():
                bindings.setdefault(dim, size)
    for value in problem_values:
        if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
            by_value.setdefault(hint(value), value)
            if isinstance(value, torch.SymInt):
                symbols.setdefault(hint(value), {}).setdefault(str(value), value)
    if not symbols:  # no symbolic problem value to follow (a test's bare signatures)
        symbols = input_symbols
    shapes = []
    for pos in sig.out_pos:
        shape = []
        for d, dim in enumerate(sig.params[pos].shape):
            if not isinstance(dim, int):
                shape.append(evaluate_dim(dim, bindings))
                continue
            if doubled is None:  # no symbolic size: any input size of that value is it
                shape.append(by_value.get(dim, dim))
                continue
            name = sig.params[pos].name
            if _checked_extent(name, d, dim, pos, symbols.get(dim, {}), doubled):
                shape.append(dim)  # a constant (an input of that size is a coincidence)
                continue
            _check_far(name, d, dim, pos, far)
            # it follows the symbolic sizes: one of the problem's of that example value (a
            # static size never doubles), the one whose doubling alone doubles it
            shape.append(_which_size(name, d, dim, pos, symbols[dim], doubled_one, symbols))
        shapes.append(tuple(shape))
    return shapes


def _checked_extent(
    name: str, d: int, dim: int, pos: int, candidates: dict[str, Any], doubled: Signature
) -> bool:
    """Whether a static extent ``dim`` of the output ``name`` is a constant (True) or follows
    the symbolic sizes (False: it doubles with them, and a symbolic size of the problem has
    its example value); else an error (see :func:`output_shapes`)."""
    other = doubled.params[pos].shape[d] if pos < len(doubled.params) else None
    if other == dim:
        return True
    if candidates and other == 2 * dim:
        return False
    raise ValueError(
        f"output {name!r} dim {d} is {dim} at these sizes and {other} at twice the symbolic "
        "ones: not one of the op's sizes, which the fake could write"
    )


def _check_far(name: str, d: int, dim: int, pos: int, far: tuple[int, Signature] | None) -> None:
    """An extent that doubles with the sizes must grow as much at ``far`` (see
    :func:`output_shapes`); a factory that refuses the far problem tells nothing."""
    if far is None:
        return
    factor, sig = far
    there = sig.params[pos].shape[d] if pos < len(sig.params) else None
    if not isinstance(there, int) or there == factor * dim:
        return
    raise ValueError(
        f"output {name!r} dim {d} is {dim} at these sizes, {2 * dim} at twice the symbolic "
        f"ones, but {there} at {factor} times them (not {factor * dim}): it follows the sizes "
        "only up to a point (such as min(n, 16)), which the fake cannot write"
    )


def _which_size(
    name: str,
    d: int,
    dim: int,
    pos: int,
    candidates: dict[str, Any],
    doubled_one: Callable[[str], Signature | None] | None,
    symbols: dict[int, dict[str, Any]],
) -> Any:
    """Of the problem's symbolic sizes with the example value ``dim``, the one this extent
    follows: the one whose doubling alone doubles it. With one symbolic size in the whole
    problem, doubling them all was doubling it; with more, the candidate is checked too (an
    output of ``2 * M`` is not ``K`` because K's example is twice M's)."""
    every = {s for by_symbol in symbols.values() for s in by_symbol}
    if len(every) == 1 and len(candidates) == 1:
        return next(iter(candidates.values()))
    found, unknown = [], []
    for symbol, size in candidates.items():
        other = doubled_one(symbol) if doubled_one is not None else None
        if other is None:  # the factory refuses this size doubled alone: tied to the others
            unknown.append(size)
        elif pos < len(other.params) and other.params[pos].shape[d] == 2 * dim:
            found.append(size)
    if len(found) == 1:
        return found[0]
    if not found and len(unknown) == 1 and len(candidates) == 1:
        return unknown[0]
    if len(candidates) == 1:
        (symbol,) = candidates
        raise ValueError(
            f"output {name!r} dim {d} is {dim} at these sizes and doubles with the symbolic "
            f"ones, but it does not follow {symbol}, the op's only size of that example value "
            "(it is an expression of other sizes, such as 2 * M): not one of the op's sizes, "
            "which the fake could write"
        )
    raise ValueError(
        f"output {name!r} dim {d} is {dim}, the example size of several of the op's sizes "
        f"({', '.join(candidates)}), and the fake cannot tell which one it is (give example "
        "inputs whose sizes differ)"
    )


def doubled_problem(value: Any, only: str | None = None, factor: int = 2) -> Any:
    """A problem with each symbolic value (``only``: the one of that name) at twice its
    example value (``factor`` times; a power of two keeps divisibility)."""
    if isinstance(value, torch.SymInt):
        return factor * hint(value) if only is None or str(value) == only else hint(value)
    if isinstance(value, (tuple, list)):
        return tuple(doubled_problem(v, only, factor) for v in value)
    if isinstance(value, dict):
        return {k: doubled_problem(v, only, factor) for k, v in value.items()}
    return value


def largest_symbolic(value: Any) -> int:
    """The largest example value of a symbolic size in a problem (0: none)."""
    if isinstance(value, torch.SymInt):
        return int(hint(value))
    if isinstance(value, (tuple, list)):
        return max((largest_symbolic(v) for v in value), default=0)
    if isinstance(value, dict):
        return max((largest_symbolic(v) for v in value.values()), default=0)
    return 0


def is_symbolic(value: Any) -> bool:
    """Whether a problem holds a symbolic size."""
    if isinstance(value, torch.SymInt):
        return True
    if isinstance(value, (tuple, list)):
        return any(is_symbolic(v) for v in value)
    if isinstance(value, dict):
        return any(is_symbolic(v) for v in value.values())
    return False


def output_dtypes(sig: Signature) -> list[torch.dtype]:
    return [torch_dtype(sig.params[pos].dtype) for pos in sig.out_pos]


def check_same_dtypes(
    name: str, sig: Signature, doubled: Signature | None, times: str = "twice"
) -> None:
    """The output dtypes at twice (``times``) the symbolic sizes are those at the example
    ones: a graph traced with symbolic sizes serves every size with the dtypes the fake
    told."""
    if doubled is None:
        return
    here = [sig.params[p].dtype for p in sig.out_pos]
    there = [doubled.params[p].dtype for p in doubled.out_pos]
    if here != there:
        raise TorchOpError(
            f"{name}: the kernel's output dtypes are {here} at these sizes and {there} at "
            f"{times} the symbolic ones: a graph traced with symbolic sizes reads every size's outputs "
            "with one dtype; output dtypes must not depend on the sizes (choose the dtype from "
            "the inputs' dtypes or a scalar argument), or trace with static sizes "
            "(torch.compile(dynamic=False))"
        )


def problem_values(problem: tuple, problem_kwargs: dict[str, Any]) -> list[Any]:
    """The flat scalar values of a problem, sizes first as the factory receives them."""
    flat: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, (tuple, list)):
            for v in value:
                walk(v)
        else:
            flat.append(value)

    walk(problem)
    walk(list(problem_kwargs.values()))
    return flat


def shapes_of(name: str, shapes: Any, count: int) -> list[tuple[Any, ...]]:
    """``out_shapes``' answer as one shape per output."""

    def dims(shape: Any) -> bool:
        return isinstance(shape, (tuple, list)) and all(
            isinstance(d, (int, torch.SymInt)) and not isinstance(d, bool) for d in shape
        )

    if count == 1 and dims(shapes):
        shapes = [shapes]
    if not isinstance(shapes, (tuple, list)) or not all(dims(s) for s in shapes):
        raise TorchOpError(
            f"{name}: out_shapes returned {shapes!r}: expected a list of {count} shape(s), "
            "each a tuple of ints (a torch.Size, or sizes of the op's tensors), e.g. "
            "out_shapes=lambda a, b: [a.shape]"
        )
    shapes = [tuple(s) for s in shapes]
    if len(shapes) != count:
        raise TorchOpError(
            f"{name}: out_shapes returned {len(shapes)} shape(s) for a kernel of {count} output(s)"
        )
    return shapes


def check_same_outputs(name: str, kernel: Signature, default: Signature) -> None:
    """A tuned kernel's outputs are those of the default config (what the fake tells)."""

    def outputs(sig: Signature) -> list[tuple[tuple[Any, ...], str]]:
        return [(tuple(sig.params[p].shape), sig.params[p].dtype) for p in sig.out_pos]

    if outputs(kernel) != outputs(default):
        raise TorchOpError(
            f"{name}: the tuned kernel returns outputs {outputs(kernel)} where the default "
            f"config's signature says {outputs(default)}: outputs must not depend on the "
            "tunables (return the unpadded result), or give torch_op(..., fake=...)"
        )
