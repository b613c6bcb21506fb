"""cloudpickle for the jobs that go to workers, with the source file of every function kept.

Functions that cloudpickle sends by value (of ``__main__``, a notebook, or defined inside
another function) arrive with the file name ``"<dynamic-code>"`` (cloudpickle >= 3.1.3), so a
worker cannot read their source, which TVMScript's ``@T.prim_func`` needs ("could not get
source code"). :func:`dumps` pickles as cloudpickle does but keeps each code object's file
name; a worker on another machine needs that file at the same path.

Both directions also carry the tensors torch cannot pickle itself: a float8, float4 or
uint16/32/64 tensor's pickle does not load in torch 2.13 (``UntypedStorage`` has no
``dtype``), so such a tensor travels as a view of a dtype of its element size that pickles
(``uint8``, ``int16``...), with its own dtype's name.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from collections import ChainMap
from typing import Any

import cloudpickle

#: The file name cloudpickle >= 3.1.3 gives the code objects it sends by value.
DYNAMIC_FILENAME = "<dynamic-code>"

_cloudpickle_code_reduce = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


def _code_reduce(code: types.CodeType) -> Any:
    """cloudpickle's reduction of ``code``, with its file name put back."""
    assert _cloudpickle_code_reduce is not None
    constructor, args = _cloudpickle_code_reduce(code)
    if code.co_filename != DYNAMIC_FILENAME:
        args = tuple(
            code.co_filename if isinstance(a, str) and a == DYNAMIC_FILENAME else a for a in args
        )
    return constructor, args


# the carrier of each dtype whose tensors torch's own pickling cannot load back (by the
# start of the dtype's name): a dtype of the same element size, so a view keeps the strides
_CARRIERS = {
    "torch.float8": "uint8",
    "torch.float4": "uint8",
    "torch.uint16": "int16",
    "torch.uint32": "int32",
    "torch.uint64": "int64",
}


def _tensor_as_bytes(obj: Any) -> Any:
    """The reduction of a tensor of a dtype in :data:`_CARRIERS`, else NotImplemented."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return NotImplemented
    name = str(obj.dtype)
    carrier = next((c for prefix, c in _CARRIERS.items() if name.startswith(prefix)), None)
    if carrier is None:
        return NotImplemented
    data = obj.detach().view(getattr(torch, carrier))
    return tensor_from_bytes, (data, name.removeprefix("torch."))


def tensor_from_bytes(data: Any, dtype: str) -> Any:
    """A tensor of ``dtype`` (a torch dtype's name) over ``data``, a tensor of a dtype of the
    same element size."""
    import torch

    return data.view(getattr(torch, dtype))


class _Pickler(cloudpickle.Pickler):
    if _cloudpickle_code_reduce is not None:  # else cloudpickle pickles code another way
        dispatch_table = ChainMap(
            {types.CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table
        )

    def reducer_override(self, obj: Any) -> Any:
        reduced = _tensor_as_bytes(obj)
        return reduced if reduced is not NotImplemented else super().reducer_override(obj)


class _PlainPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        return _tensor_as_bytes(obj)


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the file names of the code sent by value kept."""
    with io.BytesIO() as buffer:
        _Pickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return buffer.getvalue()


def dumps_plain(obj: Any) -> bytes:
    """``pickle.dumps(obj)`` (what a worker sends back), float8 tensors included."""
    with io.BytesIO() as buffer:
        _PlainPickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(obj)
        return buffer.getvalue()
