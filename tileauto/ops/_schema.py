"""A ``torch_op``'s schema: its arguments from the problem function's parameters, the tensors
it writes (``mutates_args``), and the ``torch.library`` schema text of both."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch

from tileauto.errors import TorchOpError

_SCALAR_TYPES = {bool: "bool", int: "SymInt", float: "float"}
_ANNOTATIONS = {
    "Tensor": "Tensor",
    "torch.Tensor": "Tensor",
    "bool": "bool",
    "int": "SymInt",
    "float": "float",
}


def op_params(problem: Callable[..., Any]) -> list[tuple[str, str, Any]]:
    """The op's arguments: (name, schema type, default) from problem's parameters."""
    out = []
    for p in inspect.signature(problem).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TorchOpError(
                f"problem's parameter {p.name!r} is {p.kind.description}: the op's arguments "
                "are problem's plain parameters (no *args, **kwargs or keyword-only ones)"
            )
        kind = None
        if p.annotation is not p.empty:
            ann = (
                p.annotation
                if isinstance(p.annotation, str)
                else getattr(p.annotation, "__name__", str(p.annotation))
            )
            if p.annotation is torch.Tensor:
                ann = "Tensor"
            kind = _ANNOTATIONS.get(ann)
            if kind is None:
                raise TorchOpError(
                    f"problem's parameter {p.name!r} is annotated {p.annotation!r}: an op "
                    "argument is a torch.Tensor, int, float or bool"
                )
        elif p.default is not p.empty:
            kind = _SCALAR_TYPES.get(type(p.default))
            if kind is None:
                raise TorchOpError(
                    f"problem's parameter {p.name!r} defaults to {p.default!r}: an op argument "
                    "with a default is an int, float or bool"
                )
        if p.default is not p.empty and kind == "Tensor":
            raise TorchOpError(
                f"problem's parameter {p.name!r} is a tensor with a default "
                f"({p.default!r}): an op's tensors are always given (an optional tensor, such "
                "as a bias, is not supported: make two ops, or pass a tensor of zeros)"
            )
        if p.default is not p.empty and kind is not None:
            _check_default(p.name, kind, p.default)
        out.append((p.name, kind or "Tensor", p.default))
    return out


_INT64 = (-(2**63), 2**63 - 1)


def _check_default(name: str, kind: str, default: Any) -> None:
    """A scalar default the schema holds, of the argument's type: else an error naming it."""
    wanted = {"SymInt": "an int", "float": "a float (or int)", "bool": "a bool"}[kind]
    if kind == "bool":
        ok = isinstance(default, bool)
    elif kind == "SymInt":
        ok = isinstance(default, int) and not isinstance(default, bool)
    else:
        ok = isinstance(default, (int, float)) and not isinstance(default, bool)
    if not ok:
        raise TorchOpError(
            f"problem's parameter {name!r} ({kind} in the op's schema) defaults to "
            f"{default!r} of type {type(default).__name__}: its default must be {wanted}"
        )
    if kind == "SymInt" and not _INT64[0] <= default <= _INT64[1]:
        raise TorchOpError(
            f"problem's parameter {name!r} defaults to {default!r}, outside the int64 range "
            "that an op's int argument holds"
        )
    if kind == "float" and not (abs(default) < 2**1024 and math.isfinite(default)):
        raise TorchOpError(
            f"problem's parameter {name!r} defaults to {default!r}: an op's schema holds finite "
            "float defaults only; give a finite default (or none, and pass the value)"
        )


def checked_mutates(name: str, mutates_args: Any, params: list) -> tuple[str, ...]:
    """The names of ``mutates_args``, each a tensor argument of the op."""
    if isinstance(mutates_args, str):
        raise TypeError(
            f"mutates_args must be a list of argument names, got the string {mutates_args!r}"
        )
    names = tuple(mutates_args)
    tensors = [n for n, kind, _ in params if kind == "Tensor"]
    for arg in names:
        if arg not in tensors:
            raise TorchOpError(
                f"{name}: mutates_args names {arg!r}, which is not a tensor argument of the op "
                f"(its tensors: {tensors})"
            )
    return names


def schema_text(params: list, mutates: tuple[str, ...], num_outputs: int) -> str:
    """The schema of an op of these arguments and outputs, the written tensors aliased."""
    parts = []
    alias = iter("abcdefghijklmnopqrstuvwxyz")
    for pname, kind, default in params:
        text = f"Tensor({next(alias)}!) {pname}" if pname in mutates else f"{kind} {pname}"
        if default is not inspect.Parameter.empty:
            text += f"={default!r}"
        parts.append(text)
    returns = (
        "()"
        if num_outputs == 0
        else "Tensor"
        if num_outputs == 1
        else ("(" + ", ".join(["Tensor"] * num_outputs) + ")")
    )
    return f"({', '.join(parts)}) -> {returns}"


def registered(name: str) -> bool:
    """Whether an operator of this qualified name is registered already."""
    try:
        torch._C._dispatch_find_schema_or_throw(name, "")
    except RuntimeError:
        return False
    return True
