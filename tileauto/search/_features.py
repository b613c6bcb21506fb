"""Configs as rows of numbers, for a model of which configs are fast.

Each parameter gives a few columns, looked up by value position (so encoding a batch of
configs is one fancy-indexing per parameter):

- numbers: the value; and, for positive integers of which some are powers of two and some
  are not, a 0/1 column "is a power of two" (tiles, threads and vector widths are fast at
  powers of two; ``docs/search.md`` has the measurement);
- choices (strings, bools, tied tuples of values): one 0/1 column per value, or the value's
  position when there are more than 12 values; tied numbers also give each component's value.

Parameters with a single value give no column.
"""

from __future__ import annotations

from typing import Any

from tileauto.space import Param, Space
from tileauto.space._values import is_number

_ONE_HOT_MAX = 12


class Encoder:
    """Feature rows of a space's configs, from their value positions (``space.codes``)."""

    def __init__(self, space: Space) -> None:
        import numpy as np

        self.tables: list[Any] = [_table(p) for p in space.params]
        self.width = sum(t.shape[1] for t in self.tables)
        self._np = np

    def rows(self, codes: Any) -> Any:
        """A float matrix: one row per row of ``codes``, :attr:`width` columns."""
        np = self._np
        parts = [t[codes[:, j]] for j, t in enumerate(self.tables) if t.shape[1]]
        if not parts:
            return np.zeros((len(codes), 0))
        return np.concatenate(parts, axis=1)


def _table(param: Param) -> Any:
    """The feature columns of each of a parameter's values (values x columns)."""
    import numpy as np

    values = param.values
    if len(values) < 2:
        return np.zeros((len(values), 0))
    if param.ordered:
        return _numbers([float(v) for v in values])
    columns = []
    if len(param.names) > 1:  # tied: each component that is a number, as a number
        for k in range(len(param.names)):
            part = [v[k] for v in values]
            if all(is_number(x) for x in part) and len(set(part)) > 1:
                columns.append(_numbers([float(x) for x in part]))
    if len(values) <= _ONE_HOT_MAX:
        columns.append(np.eye(len(values)) if len(values) > 2 else np.arange(2.0)[:, None])
    else:
        columns.append(np.arange(float(len(values)))[:, None])
    return np.concatenate(columns, axis=1)


def _numbers(values: list[float]) -> Any:
    import numpy as np

    v = np.asarray(values, dtype=np.float64)[:, None]
    whole = all(x > 0 and x == int(x) for x in values)
    if whole:
        pow2 = np.asarray([int(x) & (int(x) - 1) == 0 for x in values], dtype=np.float64)
        if 0 < pow2.sum() < len(values):
            return np.concatenate([v, pow2[:, None]], axis=1)
    return v
