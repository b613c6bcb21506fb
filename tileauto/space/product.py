"""The constrained product: every combination of the parameters' values, kept lazy.

An index is decoded into a config (mixed radix, the first parameter most significant, as
``itertools.product``). Constraints are applied in vectorized chunks, in order, each chunk
once, and only as far as something asks (the ``k``-th valid config needs the chunks up to
it; ``len`` needs them all): what is kept is the offset of each valid config in its chunk
(2 bytes each, no dicts).
"""

from __future__ import annotations

import ast
import math
import numbers
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tileauto.errors import ConfigSpaceError
from tileauto.space._values import config_id, numpy_module, radix
from tileauto.space.constraints import Constraint
from tileauto.space.types import Param, Space

if TYPE_CHECKING:
    from numpy.typing import NDArray


_CHUNK = 1 << 16  # configs checked at once by a constraint scan (an offset in one fits a uint16)
MAX_CONSTRAINED_PRODUCT = 1 << 27  # products up to this size may carry constraints (a scan)


class ProductSpace(Space):
    """Every combination of the parameters' values that satisfies the constraints (lazy).

    Without constraints, an index is decoded into a config directly. With constraints, the
    positions of the valid configs are found by checking the product in chunks of 65,536, in
    order and as far as needed: config ``i`` (or :meth:`count_upto`) scans up to the ``i``-th
    valid config, ``len`` and :attr:`pruned` scan the whole product. Expression constraints
    run on arrays of the chunk's values, callables on the configs the expressions kept. Use
    :func:`product` to build one.
    """

    def __init__(self, params: Sequence[Param], constraints: Sequence[Any] = ()) -> None:
        names = [n for p in params for n in p.names]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigSpaceError(f"parameters {twice} are given more than once")
        if not params:
            raise ConfigSpaceError("a product needs at least one parameter")
        for p in params:
            _check_distinct(p)
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
        self._scan = _Scan(self) if self.rules else None

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
        if self._scan is None:
            return self.product_size
        return self._scan.through(None)

    @property
    def counted(self) -> bool:
        return self._scan is None or self._scan.done

    def count_upto(self, k: int) -> int:
        if self._scan is None:
            return min(self.product_size, k)
        return min(self._scan.through(k), k) if k > 0 else 0

    @property
    def pruned(self) -> dict[str, int]:
        if self._scan is None:
            return {}
        self._scan.through(None)
        return dict(self._scan.pruned)

    @property
    def pruned_so_far(self) -> dict[str, int]:
        """What each constraint removed from the part of the product scanned until now (the
        whole product once :attr:`counted`)."""
        return {} if self._scan is None else dict(self._scan.pruned)

    def config(self, index: int) -> dict[str, Any]:
        if self._scan is not None:
            if index < 0 or self._scan.through(index + 1) <= index:
                raise IndexError(f"config index {index} out of range for {len(self)}")
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
        positions = self._positions(idx) if self._scan is not None else idx
        return self._decode(positions)

    def index_of(self, codes: NDArray[Any]) -> NDArray[Any]:
        np = numpy_module()
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(self.params))
        inside = ((codes >= 0) & (codes < np.asarray(self._sizes))).all(axis=1)
        positions = np.where(inside[:, None], codes, 0) @ np.asarray(self._radix, dtype=np.int64)
        if self._scan is None:
            return np.where(inside, positions, -1)
        chunk, offset = positions // _CHUNK, positions % _CHUNK
        if len(chunk):
            self._scan.cover(int(chunk[inside].max()) if inside.any() else 0)
        valid, starts = self._scan.arrays()
        if not len(valid):
            return np.full(len(codes), -1, dtype=np.int64)
        chunk = np.minimum(chunk, len(starts) - 2)  # rows outside the product: masked below
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

    def _positions(self, indices: Sequence[int] | NDArray[Any]) -> NDArray[Any]:
        """The product positions of valid configs by index (scanning as far as the largest)."""
        np = numpy_module()
        assert self._scan is not None
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx):
            have = self._scan.through(int(idx.max()) + 1)
            if int(idx.min()) < 0 or int(idx.max()) >= have:
                raise IndexError(f"config indices out of range for {len(self)}")
        valid, starts = self._scan.arrays()
        chunk = np.searchsorted(starts, idx, side="right") - 1
        return chunk * _CHUNK + valid[idx].astype(np.int64)


class _Scan:
    """The constraint scan of a product: chunks checked in order, as far as asked.

    ``valid`` holds each valid config's offset in its chunk (uint16), in a buffer that doubles
    as it fills; ``starts[c]`` is how many valid configs come before chunk ``c`` (one more
    entry per scanned chunk: the count so far).
    """

    def __init__(self, space: ProductSpace) -> None:
        np = numpy_module()
        self.space = space
        self.chunks = -(-space.product_size // _CHUNK)
        self.scanned = 0  # chunks checked
        self.count = 0  # valid configs found in them
        self.pruned = dict.fromkeys((r.name for r in space.rules), 0)
        self._valid = np.zeros(_CHUNK, dtype=np.uint16)
        self._starts = np.zeros(min(self.chunks, 1024) + 1, dtype=np.int64)
        exprs = [r for r in space.rules if r.expression is not None]
        self.exprs, self.calls = exprs, [r for r in space.rules if r.expression is None]
        used = {
            node.id
            for r in exprs
            for node in ast.walk(r.expression)  # type: ignore[arg-type]
            if isinstance(node, ast.Name)
        }
        # only the parameters the expressions name are decoded (a division per parameter)
        self.tables = [(j, p.columns()) for j, p in enumerate(space.params) if used & set(p.names)]
        self.entries = [[p.assign(c) for c in range(len(p.values))] for p in space.params]

    @property
    def done(self) -> bool:
        return self.scanned >= self.chunks

    def through(self, k: int | None) -> int:
        """Scan until at least ``k`` valid configs are known (None: the whole product); how
        many are known then."""
        while not self.done and (k is None or self.count < k):
            self._next()
        return self.count

    def cover(self, chunk: int) -> None:
        """Scan every chunk up to ``chunk`` (inclusive)."""
        while not self.done and self.scanned <= chunk:
            self._next()

    def arrays(self) -> tuple[NDArray[Any], NDArray[Any]]:
        """The valid offsets and the chunk starts scanned so far (views, not copies)."""
        return self._valid[: self.count], self._starts[: self.scanned + 1]

    def _next(self) -> None:
        np = numpy_module()
        s = self.space
        start = self.scanned * _CHUNK
        positions = np.arange(start, min(start + _CHUNK, s.product_size), dtype=np.int64)
        columns: dict[str, NDArray[Any]] = {}
        for j, table in self.tables:
            code = positions // s._radix[j] % s._sizes[j]
            columns.update((name, col[code]) for name, col in table.items())
        alive = np.ones(len(positions), dtype=bool)
        for rule in self.exprs:
            ok = rule.check_columns(columns, len(positions))
            self.pruned[rule.name] += int(np.count_nonzero(alive & ~ok))
            alive &= ok
        if self.calls:
            survivors = np.flatnonzero(alive)
            for k, row in zip(survivors, s._decode(positions[survivors]).tolist()):
                config = {}
                for j, code in enumerate(row):
                    config.update(self.entries[j][code])
                for rule in self.calls:
                    if not rule.check(config):
                        self.pruned[rule.name] += 1
                        alive[k] = False
                        break
        kept = np.flatnonzero(alive).astype(np.uint16)  # an offset in a chunk of 2^16
        end = self.count + len(kept)
        if end > len(self._valid):
            grown = np.zeros(max(end, 2 * len(self._valid)), dtype=np.uint16)
            grown[: self.count] = self._valid[: self.count]
            self._valid = grown
        self._valid[self.count : end] = kept
        if self.scanned + 2 > len(self._starts):
            grown_starts = np.zeros(min(self.chunks, 2 * len(self._starts)) + 1, dtype=np.int64)
            grown_starts[: self.scanned + 1] = self._starts[: self.scanned + 1]
            self._starts = grown_starts
        self.count = end
        self.scanned += 1
        self._starts[self.scanned] = end
        if self.done and len(self._valid) > end:  # give back what doubling took beyond it
            self._valid = self._valid[:end].copy()


def _by_value(value: Any) -> Any:
    """A value as a kernel sees it: numbers by value (``64`` is ``64.0``), bools apart from
    numbers, tuples and lists by their items."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, numbers.Number):
        return ("number", value)
    if isinstance(value, (tuple, list)):
        return ("items", tuple(_by_value(v) for v in value))
    return ("other", config_id({"v": value}))


def _check_distinct(param: Param) -> None:
    """Refuse a parameter that lists one value twice as numbers of two types (``[64, 64.0]``):
    one kernel config, compiled and measured as two."""
    seen: dict[Any, Any] = {}
    for v in param.values:
        key = _by_value(v)
        if key in seen:
            raise ConfigSpaceError(
                f"parameter {param.name!r} repeats a value: {seen[key]!r} and {v!r} are equal "
                f"(one config to a kernel); give each value once, got {list(param.values)}"
            )
        seen[key] = v


def product(
    *params: Param, constraints: Iterable[Any] | None = (), **values: Iterable[Any]
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
            to keep it. A config that fails one is pruned, never compiled. None: none.
        values: ``name=[values]`` for each other parameter.

    Raises:
        ConfigSpaceError: a bad parameter or constraint (named), or a product too large.
    """
    if constraints is None:  # no constraints
        constraints = ()
    elif isinstance(constraints, (str, bytes)) or callable(constraints):
        constraints = [constraints]
    every = [*params, *(Param.of(name, vals) for name, vals in values.items())]
    if not all(isinstance(p, Param) for p in every):
        raise ConfigSpaceError(
            "product() takes Param objects positionally and name=[values] as keywords"
        )
    try:
        rules = list(constraints)
    except TypeError:
        raise ConfigSpaceError(
            "product() constraints must be a list of expressions or callables (or one, or "
            f"None), got {type(constraints).__name__} {constraints!r:.60}"
        ) from None
    return ProductSpace(every, rules)
