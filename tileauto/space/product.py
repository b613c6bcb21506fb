"""The constrained product: every combination of the parameters' values, kept lazy.

An index is decoded into a config (mixed radix, the first parameter most significant, as
``itertools.product``). Constraints are applied once, over the whole product, in vectorized
chunks that keep only the offset of each valid config in its chunk (2 bytes each, no dicts).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tileauto.errors import ConfigSpaceError
from tileauto.space._values import numpy_module, radix
from tileauto.space.constraints import Constraint
from tileauto.space.types import Param, Space

if TYPE_CHECKING:
    from numpy.typing import NDArray


_CHUNK = 1 << 16  # configs checked at once by a constraint scan (an offset in one fits a uint16)
MAX_CONSTRAINED_PRODUCT = 1 << 27  # products up to this size may carry constraints (a scan)


class ProductSpace(Space):
    """Every combination of the parameters' values that satisfies the constraints (lazy).

    Without constraints, an index is decoded into a config directly. With constraints, the
    positions of the valid configs are found once, on first use (``len``, indexing, iterating),
    by checking the product in chunks of 65,536: expression constraints run on arrays of the
    chunk's values, callables on the configs the expressions kept. Use :func:`product` to
    build one.
    """

    def __init__(self, params: Sequence[Param], constraints: Sequence[Any] = ()) -> None:
        names = [n for p in params for n in p.names]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigSpaceError(f"parameters {twice} are given more than once")
        if not params:
            raise ConfigSpaceError("a product needs at least one parameter")
        self.params = tuple(params)
        rules: list[Constraint] = []
        for c in constraints:
            rule = Constraint.of(c, names)
            taken = {r.name for r in rules}
            if rule.name in taken:  # two lambdas: keep their counts apart
                k = 2
                while f"{rule.name} #{k}" in taken:
                    k += 1
                rule = Constraint(f"{rule.name} #{k}", rule.source, rule.expression)
            rules.append(rule)
        for rule in rules:
            rule.probe(self.params)  # a type error shows here, not at the first len()
        self.rules = tuple(rules)
        self._sizes = [len(p.values) for p in self.params]
        self._radix = radix(self._sizes)
        self.product_size = math.prod(self._sizes)
        if self.product_size >= 1 << 62:
            raise ConfigSpaceError(
                f"a product of {self.product_size} configs is too large to "
                "index; split the space or give fewer values"
            )
        if self.rules and self.product_size > MAX_CONSTRAINED_PRODUCT:
            raise ConfigSpaceError(
                f"a product of {self.product_size:,} configs is too large to check constraints "
                f"over (the limit is {MAX_CONSTRAINED_PRODUCT:,}); give fewer values, or tie "
                "parameters that move together into one parameter (Param.of('a, b', [...]))"
            )
        self._valid: NDArray[Any] | None = None
        self._starts: NDArray[Any] | None = None
        self._pruned: dict[str, int] = {}

    # -- composition -----------------------------------------------------------------------------
    def where(self, *constraints: Any) -> ProductSpace:
        """This space with more constraints."""
        return ProductSpace(self.params, [*(r.source for r in self.rules), *constraints])

    def __mul__(self, other: ProductSpace) -> ProductSpace:
        """The product of two spaces: every pair of their configs, both constraints applied."""
        if not isinstance(other, ProductSpace):
            return NotImplemented
        return ProductSpace(
            [*self.params, *other.params],
            [*(r.source for r in self.rules), *(r.source for r in other.rules)],
        )

    def describe(self) -> dict[str, Any]:
        """The space as plain data (for a cache key): each parameter's names and values, and
        each constraint: an expression's text, or the callable itself (the cache keys it by
        its source and what it reaches)."""
        return {
            "params": [
                [list(p.names), [list(v) if isinstance(v, tuple) else v for v in p.values]]
                for p in self.params
            ],
            "constraints": [r.name if r.expression is not None else r.source for r in self.rules],
        }

    # -- indexing --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.product_size if not self.rules else int(self._index()[1][-1])

    @property
    def pruned(self) -> dict[str, int]:
        if self.rules:
            self._index()
        return dict(self._pruned)

    def config(self, index: int) -> dict[str, Any]:
        if self.rules:
            n = len(self)
            if not 0 <= index < n:
                raise IndexError(f"config index {index} out of range for {n}")
            position = int(self._positions([index])[0])
        else:
            if not 0 <= index < self.product_size:
                raise IndexError(f"config index {index} out of range for {self.product_size}")
            position = int(index)
        out: dict[str, Any] = {}
        for p, r, s in zip(self.params, self._radix, self._sizes):
            out.update(p.assign((position // r) % s))
        return out

    def codes(self, indices: Sequence[int] | NDArray[Any]) -> NDArray[Any]:
        np = numpy_module()
        idx = np.asarray(indices, dtype=np.int64)
        positions = self._positions(idx) if self.rules else idx
        return self._decode(positions)

    def index_of(self, codes: NDArray[Any]) -> NDArray[Any]:
        np = numpy_module()
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(self.params))
        inside = ((codes >= 0) & (codes < np.asarray(self._sizes))).all(axis=1)
        positions = np.where(inside[:, None], codes, 0) @ np.asarray(self._radix, dtype=np.int64)
        if not self.rules:
            return np.where(inside, positions, -1)
        valid, starts = self._index()
        if not len(valid):
            return np.full(len(codes), -1, dtype=np.int64)
        chunk, offset = positions // _CHUNK, positions % _CHUNK
        lo, end = starts[chunk], starts[chunk + 1]
        hi = end.copy()
        while (active := lo < hi).any():  # a binary search in each row's chunk, all rows at once
            mid = (lo + hi) // 2
            right = active & (valid[np.minimum(mid, len(valid) - 1)] < offset)
            lo, hi = np.where(right, mid + 1, lo), np.where(active & ~right, mid, hi)
        found = inside & (lo < end) & (valid[np.minimum(lo, len(valid) - 1)] == offset)
        return np.where(found, lo, -1)

    def _decode(self, positions: NDArray[Any]) -> NDArray[Any]:
        np = numpy_module()
        place = np.asarray(self._radix, dtype=np.int64)
        sizes = np.asarray(self._sizes, dtype=np.int64)
        return (np.asarray(positions, dtype=np.int64)[:, None] // place) % sizes

    def _index(self) -> tuple[NDArray[Any], NDArray[Any]]:
        """The valid configs, found once: each one's offset in its chunk of the product
        (uint16), and how many valid configs come before each chunk (one more entry: all)."""
        if self._valid is None or self._starts is None:
            self._valid, self._starts, self._pruned = self._scan()
        return self._valid, self._starts

    def _positions(self, indices: Sequence[int] | NDArray[Any]) -> NDArray[Any]:
        """The product positions of valid configs by index."""
        np = numpy_module()
        valid, starts = self._index()
        idx = np.asarray(indices, dtype=np.int64)
        chunk = np.searchsorted(starts, idx, side="right") - 1
        return chunk * _CHUNK + valid[idx].astype(np.int64)

    def _scan(self) -> tuple[NDArray[Any], NDArray[Any], dict[str, int]]:
        np = numpy_module()
        exprs = [r for r in self.rules if r.expression is not None]
        calls = [r for r in self.rules if r.expression is None]
        used = {
            node.id
            for r in exprs
            for node in ast.walk(r.expression)  # type: ignore[arg-type]
            if isinstance(node, ast.Name)
        }
        # only the parameters the expressions name are decoded (a division per parameter)
        tables = [(j, p.columns()) for j, p in enumerate(self.params) if used & set(p.names)]
        entries = [[p.assign(c) for c in range(len(p.values))] for p in self.params]
        pruned = dict.fromkeys((r.name for r in self.rules), 0)
        kept, counts = [], [0]
        for start in range(0, self.product_size, _CHUNK):
            positions = np.arange(start, min(start + _CHUNK, self.product_size), dtype=np.int64)
            columns: dict[str, NDArray[Any]] = {}
            for j, table in tables:
                code = positions // self._radix[j] % self._sizes[j]
                columns.update((name, col[code]) for name, col in table.items())
            alive = np.ones(len(positions), dtype=bool)
            for rule in exprs:
                ok = rule.check_columns(columns, len(positions))
                pruned[rule.name] += int(np.count_nonzero(alive & ~ok))
                alive &= ok
            survivors = np.flatnonzero(alive) if calls else ()
            rows = self._decode(positions[survivors]).tolist() if calls else ()
            for k, row in zip(survivors, rows):
                config = {}
                for j, code in enumerate(row):
                    config.update(entries[j][code])
                for rule in calls:
                    if not rule.check(config):
                        pruned[rule.name] += 1
                        alive[k] = False
                        break
            kept.append(np.flatnonzero(alive).astype(np.uint16))  # an offset in a chunk of 2^16
            counts.append(len(kept[-1]))
        valid = np.concatenate(kept) if kept else np.zeros(0, dtype=np.uint16)
        return valid, np.cumsum(counts, dtype=np.int64), pruned


def product(
    *params: Param, constraints: Iterable[Any] = (), **values: Iterable[Any]
) -> ProductSpace:
    """The product of parameters' values, with constraints: a lazy :class:`Space`.

    ``product(block_M=[64, 128], block_N=[64, 128], micro_M=[4, 8],
    constraints=["block_M % micro_M == 0"])``. Positional :class:`Param` objects come first
    (tied names: ``Param.of("micro_M, micro_N", [(4, 16), (8, 32)])``), then the keywords, in
    order; the first parameter varies slowest.

    Args:
        params: parameters built with :meth:`Param.of`.
        constraints: expressions over the parameter names (``"block_M % micro_M == 0"``:
            names, numbers, strings, arithmetic, comparisons, ``in``, ``and``/``or``/``not``;
            no calls, no attributes) or callables that take a config dict and return whether
            to keep it. A config that fails one is pruned, never compiled.
        values: ``name=[values]`` for each other parameter.

    Raises:
        ConfigSpaceError: a bad parameter or constraint (named), or a product too large.
    """
    if isinstance(constraints, (str, bytes)) or callable(constraints):
        constraints = [constraints]
    every = [*params, *(Param.of(name, vals) for name, vals in values.items())]
    if not all(isinstance(p, Param) for p in every):
        raise ConfigSpaceError(
            "product() takes Param objects positionally and name=[values] as keywords"
        )
    return ProductSpace(every, list(constraints))
