"""cloudpickle for the jobs that go to workers, with the source file of every function kept.

Functions that cloudpickle sends by value (of ``__main__``, a notebook, or defined inside
another function) arrive with the file name ``"<dynamic-code>"`` (cloudpickle >= 3.1.3), so a
worker cannot read their source, which TVMScript's ``@T.prim_func`` needs ("could not get
source code"). :func:`dumps` pickles as cloudpickle does but keeps each code object's file
name; a worker on another machine needs that file at the same path.
"""

from __future__ import annotations

import io
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


class _Pickler(cloudpickle.Pickler):
    if _cloudpickle_code_reduce is not None:  # else cloudpickle pickles code another way
        dispatch_table = ChainMap(
            {types.CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table
        )


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the file names of the code sent by value kept."""
    with io.BytesIO() as buffer:
        _Pickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return buffer.getvalue()
