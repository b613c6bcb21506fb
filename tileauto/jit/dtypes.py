"""TVM dtype names to torch dtypes: what a kernel's buffers are allocated and checked with."""

from __future__ import annotations

import torch

from tileauto.errors import KernelArgumentError

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
    # torch has them (2.3+), with fewer operations than the signed ones
    **{
        f"uint{bits}": getattr(torch, f"uint{bits}")
        for bits in (16, 32, 64)
        if hasattr(torch, f"uint{bits}")
    },
    "bool": torch.bool,
    "float8_e4m3fn": getattr(torch, "float8_e4m3fn", torch.uint8),
    "float8_e5m2": getattr(torch, "float8_e5m2", torch.uint8),
}


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype for a TVM dtype string.

    Raises:
        KernelArgumentError: torch has no such dtype.
    """
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        raise KernelArgumentError(f"dtype {dtype!r} has no torch equivalent") from None
