"""cloudpickle for the jobs that go to workers, with the source file of every function kept.

Functions that cloudpickle sends by value (of ``__main__``, a notebook, or defined inside
another function) arrive with the file name ``"<dynamic-code>"`` (cloudpickle >= 3.1.3), so a
worker cannot read their source, which TVMScript's ``@T.prim_func`` needs ("could not get
source code"). :func:`dumps` pickles as cloudpickle does but keeps each code object's file
name; a worker on another machine needs that file at the same path.

Both directions also carry the tensors torch cannot pickle itself: a float8 (or float4)
tensor's ``pickle.dumps`` fails in torch 2.13 (``UntypedStorage`` has no ``dtype`` on
loading), so such a tensor travels as its bytes (a ``uint8`` view) and its dtype's name.
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


# the dtypes whose tensors torch's own pickling cannot load back (by the dtype's name)
_AS_BYTES = ("torch.float8", "torch.float4")


def _tensor_as_bytes(obj: Any) -> Any:
    """The reduction of a tensor of a dtype in :data:`_AS_BYTES`, else NotImplemented."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return NotImplemented
    name = str(obj.dtype)
    if not name.startswith(_AS_BYTES):
        return NotImplemented
    return tensor_from_bytes, (obj.detach().view(torch.uint8), name.removeprefix("torch."))


def tensor_from_bytes(data: Any, dtype: str) -> Any:
    """A tensor of ``dtype`` (a torch dtype's name) over the bytes ``data`` (a uint8 tensor)."""
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
