"""Guarded buffers for a validation run: every tensor sits between canary elements.

A kernel that writes a few elements past the end of a buffer usually returns normally (and
corrupts the heap). Allocating each input clone and output with ``PAD`` sentinel elements on
both sides, and checking them after the run, turns such a write into a reported failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tileauto.artifact import ParamSpec
from tileauto.jit.dtypes import torch_dtype
from tileauto.run.validate import fill_value

PAD = 64  # canary elements on each side; 64 elements keep 64-byte alignment for every dtype


def padded_buffer(
    shape: Sequence[int], dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    numel = 1
    for d in shape:
        numel *= int(d)
    buf = torch.full((numel + 2 * PAD,), fill_value(dtype), dtype=dtype, device=device)
    return buf[PAD : PAD + numel].view(tuple(shape)), buf


def padded_clones(tensors: Sequence[Any]) -> tuple[list[Any], list[torch.Tensor | None]]:
    """Guarded copies of the inputs (scalar arguments pass through, with no buffer)."""
    views: list[Any] = []
    bufs: list[torch.Tensor | None] = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            views.append(t)
            bufs.append(None)
            continue
        view, buf = padded_buffer(t.shape, t.dtype, str(t.device))
        view.copy_(t)
        views.append(view)
        bufs.append(buf)
    return views, bufs


def padded_outputs(
    params: Sequence[ParamSpec], out_idx: Sequence[int], ins: list, device: str
) -> tuple[list, list]:
    bindings: dict[str, int] = {}
    for spec, t in zip([p for i, p in enumerate(params) if i not in set(out_idx)], ins):
        if spec.scalar:  # a length passed by value binds its size variable (a float never does)
            if spec.dtype.startswith(("int", "uint")):
                bindings.setdefault(spec.size_var, int(t))
            continue
        for d, dim in enumerate(spec.shape):
            if isinstance(dim, str) and dim.isidentifier():
                bindings.setdefault(dim, int(t.shape[d]))
    views, bufs = [], []
    for p in out_idx:
        view, buf = padded_buffer(
            params[p].resolve_shape(bindings), torch_dtype(params[p].dtype), device
        )
        views.append(view)
        bufs.append(buf)
    return views, bufs


def canaries_intact(buf: torch.Tensor) -> bool:
    pads = torch.cat([buf[:PAD], buf[-PAD:]])
    if pads.is_floating_point():
        return bool(torch.isnan(pads).all())
    return bool((pads == fill_value(pads.dtype)).all())


def interleave(
    n: int, in_pos: Sequence[int], ins: list, out_pos: Sequence[int], outs: list
) -> list:
    full: list = [None] * n
    for p, t in zip(in_pos, ins):
        full[p] = t
    for p, t in zip(out_pos, outs):
        full[p] = t
    return full
