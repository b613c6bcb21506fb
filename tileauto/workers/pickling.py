"""cloudpickle for the jobs that go to workers, with the source file of every function kept.

Functions that cloudpickle sends by value (those of ``__main__``, of a notebook, defined inside
another function) arrive in the worker as new code objects. Since cloudpickle 3.1.3 their
file name is ``"<dynamic-code>"`` (so that a payload does not depend on where its code was
defined). A worker then cannot read their source, and TVMScript needs it: a factory that
builds its kernel with ``@T.prim_func`` fails every compile with "OSError: could not get source
code". :func:`dumps` pickles as cloudpickle does, except that code objects keep their file
name; the worker reads the source from that file, as it did before cloudpickle 3.1.3 (a
worker on another machine needs the file at the same path, as before).
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
