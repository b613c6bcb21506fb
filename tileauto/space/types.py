"""The space types: a parameter and its values, a space of configs by index, a list as a space.

A :class:`Space` is a sequence of configs that strategies see as value positions (codes), never
as dicts: :meth:`Space.codes` and :meth:`Space.index_of` go both ways.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tileauto.errors import ConfigSpaceError
from tileauto.space._values import (
    ABSENT,
    array,
    config_id,
    is_number,
    not_plain,
    numpy_module,
    plain,
    radix,
    value_key,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray


@dataclass(frozen=True)
class Param:
    """One tuned parameter, or several tied together, and the values it takes.

    Attributes:
        names: the parameter's name, or the names of parameters that move together
            (``("micro_M", "micro_N")`` with values ``((4, 16), (8, 32))``).
        values: the values, in the order given; for tied names, one tuple per value.
        ordered: True when the values are numbers (a strategy may treat them as ordered);
            False for choices (strings, bools, tuples of tied values).
    """

    names: tuple[str, ...]
    values: tuple[Any, ...]
    ordered: bool

    @classmethod
    def of(cls, name: str | Sequence[str], values: Iterable[Any]) -> Param:
        """A checked parameter: ``Param.of("block_M", [32, 64])``, or tied names given as
        ``"micro_M, micro_N"`` (or a tuple of names) with a tuple of values per entry.

        Raises:
            ConfigSpaceError: no values, repeated values, a value that is not plain data, or
                a tied value whose length differs from the number of names.
        """
        names = tuple(n.strip() for n in name.split(",")) if isinstance(name, str) else tuple(name)
        if not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ConfigSpaceError(
                f"a parameter name must be an identifier (or several, "
                f"comma-separated, for tied values), got {name!r}"
            )
        label = ", ".join(names)
        if isinstance(values, (str, bytes, dict)) or not isinstance(values, Iterable):
            raise ConfigSpaceError(f"parameter {label!r} takes a list of values, got {values!r}")
        vals = tuple(plain(v) for v in values)
        if not vals:
            raise ConfigSpaceError(f"parameter {label!r} has no values: give at least one")
        for v in vals:
            problem = not_plain(v)
            if problem is not None:
                raise ConfigSpaceError(
                    f"parameter {label!r} has a value that is {problem}; "
                    "values must be plain data (numbers, strings, bools)"
                )
            if len(names) > 1 and not (isinstance(v, (tuple, list)) and len(v) == len(names)):
                raise ConfigSpaceError(
                    f"parameter {label!r} ties {len(names)} names, so each "
                    f"value must be a tuple of {len(names)}, got {v!r}"
                )
        if len(names) > 1:
            vals = tuple(tuple(v) for v in vals)
        seen = [config_id({"v": v}) for v in vals]
        if len(set(seen)) != len(seen):
            raise ConfigSpaceError(f"parameter {label!r} repeats a value: {list(vals)}")
        ordered = len(names) == 1 and all(is_number(v) for v in vals)
        return cls(names, vals, ordered)

    @property
    def name(self) -> str:
        """The name, or the tied names joined by ", "."""
        return ", ".join(self.names)

    def assign(self, code: int) -> dict[str, Any]:
        """The config entries of the value at position ``code``."""
        value = self.values[code]
        if len(self.names) == 1:
            return {} if value is ABSENT else {self.names[0]: value}
        return dict(zip(self.names, value))

    def columns(self) -> dict[str, NDArray[Any]]:
        """Each name's values as an array indexed by value position (for vectorized checks)."""
        if len(self.names) == 1:
            return {self.names[0]: array([None if v is ABSENT else v for v in self.values])}
        return {n: array([v[k] for v in self.values]) for k, n in enumerate(self.names)}


class Space:
    """A tuning space: configs by index, and the parameters they are made of.

    Iterating yields dicts (``list(space)`` is the list of configs), so code that takes a list
    of dicts keeps working; strategies use :meth:`codes` and :meth:`index_of` instead, which
    see each config as the positions of its values in the parameters' value lists.
    """

    params: tuple[Param, ...]

    def __len__(self) -> int:
        raise NotImplementedError

    def config(self, index: int) -> dict[str, Any]:
        """The config at ``index`` (a new dict)."""
        raise NotImplementedError

    def codes(self, indices: Sequence[int] | NDArray[Any]) -> NDArray[Any]:
        """Value positions, one row per index and one column per parameter (int64)."""
        raise NotImplementedError

    def index_of(self, codes: NDArray[Any]) -> NDArray[Any]:
        """The index of each row of value positions, or -1 where no config of the space has it."""
        raise NotImplementedError

    @property
    def pruned(self) -> dict[str, int]:
        """How many configs each constraint removed (empty when there are none)."""
        return {}

    @property
    def counted(self) -> bool:
        """Whether ``len`` is known without work (a constrained product counts its valid
        configs by scanning the whole product: until then, only a prefix is known)."""
        return True

    def count_upto(self, k: int) -> int:
        """``min(len(self), k)``, without counting past ``k`` configs where the space can
        (a constrained product scans only as far as its ``k``-th valid config)."""
        return min(len(self), k)

    def find(self, config: dict[str, Any]) -> int:
        """The index of ``config`` (a dict with a value for every parameter), or -1.

        Keys that are not parameters of the space are ignored; a missing key or a value that
        is not one of its parameter's values gives -1.
        """
        lookup = self.__dict__.get("_value_codes")
        if lookup is None:  # value -> position, per parameter (an absent value keys as "")
            lookup = [
                {"" if v is ABSENT else value_key(v): k for k, v in enumerate(p.values)}
                for p in self.params
            ]
            self.__dict__["_value_codes"] = lookup
        row = []
        for p, codes in zip(self.params, lookup):
            if len(p.names) == 1:
                value = config.get(p.names[0], ABSENT)
            else:
                value = tuple(config.get(n, ABSENT) for n in p.names)
            code = codes.get("" if value is ABSENT else value_key(plain(value)), -1)
            if code < 0:
                return -1
            row.append(code)
        return int(self.index_of(numpy_module().asarray([row], dtype=numpy_module().int64))[0])

    @property
    def names(self) -> tuple[str, ...]:
        """Every parameter name, tied names one by one."""
        return tuple(n for p in self.params for n in p.names)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"a Space is indexed by an int, got {type(index).__name__}")
        n = len(self)
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"config index {index} out of range for a space of {n}")
        return self.config(i)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self.config(i)

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}[{len(p.values)}]" for p in self.params)
        size = len(self) if self.counted else "not yet counted"  # a repr never scans
        return f"{type(self).__name__}({size} configs: {params})"

    @staticmethod
    def from_configs(
        configs: Iterable[dict[str, Any]], params: Sequence[Param] | None = None
    ) -> ListSpace:
        """A space of the given configs, in order; each parameter's values inferred from them
        (numbers sorted, other values in order of appearance) unless ``params`` are given."""
        return ListSpace(configs, params)


class ListSpace(Space):
    """A space given as a list of configs (the configs are kept; their codes are computed)."""

    def __init__(self, configs: Iterable[dict[str, Any]], params: Sequence[Param] | None = None):
        np = numpy_module()
        self._configs = [dict(c) for c in configs]
        self.params = tuple(params) if params is not None else _infer_params(self._configs)
        names = [n for p in self.params for n in p.names]
        if len(set(names)) != len(names):  # as a product refuses them
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ConfigSpaceError(f"parameters {twice} are given more than once")
        lookup = [{value_key(v): k for k, v in enumerate(p.values)} for p in self.params]
        codes = np.zeros((len(self._configs), len(self.params)), dtype=np.int64)
        for i, cfg in enumerate(self._configs):
            for j, p in enumerate(self.params):
                value = (
                    cfg.get(p.names[0], ABSENT)
                    if len(p.names) == 1
                    else tuple(cfg.get(n) for n in p.names)
                )
                code = lookup[j].get(value_key(value))
                if code is None:
                    raise ConfigSpaceError(
                        f"config {i} = {cfg!r} sets {p.name} to {value!r}, which is not one of "
                        f"its values {list(p.values)}"
                    )
                codes[i, j] = code
        self._codes = codes
        self._sizes = [len(p.values) for p in self.params]
        self._radix = radix(self._sizes)
        self._exact = math.prod(self._sizes) < 1 << 62
        if self._exact:
            keys = codes @ np.asarray(self._radix, dtype=np.int64)
        else:
            keys = np.asarray([hash(tuple(row)) for row in codes.tolist()], dtype=np.int64)
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]

    def __len__(self) -> int:
        return len(self._configs)

    def config(self, index: int) -> dict[str, Any]:
        return dict(self._configs[index])

    def codes(self, indices: Sequence[int] | NDArray[Any]) -> NDArray[Any]:
        np = numpy_module()
        return self._codes[np.asarray(indices, dtype=np.int64)]

    def index_of(self, codes: NDArray[Any]) -> NDArray[Any]:
        np = numpy_module()
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(self.params))
        if not len(self._configs):
            return np.full(len(codes), -1, dtype=np.int64)
        if self._exact:
            inside = ((codes >= 0) & (codes < np.asarray(self._sizes))).all(axis=1)
            keys = np.where(inside[:, None], codes, 0) @ np.asarray(self._radix, dtype=np.int64)
        else:
            inside = np.ones(len(codes), dtype=bool)
            keys = np.asarray([hash(tuple(row)) for row in codes.tolist()], dtype=np.int64)
        at = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        found = inside & (self._keys[at] == keys)
        index = self._order[at]
        if not self._exact:  # a hash can collide: confirm the codes
            found &= (self._codes[index] == codes).all(axis=1)
        return np.where(found, index, -1)


def _infer_params(configs: list[dict[str, Any]]) -> tuple[Param, ...]:
    """Each name's values across the configs: numbers sorted, others in order of appearance."""
    names: dict[str, dict[str, Any]] = {}
    for cfg in configs:
        for k, v in cfg.items():
            names.setdefault(k, {}).setdefault(value_key(v), v)
    params = []
    for name, found in names.items():
        values = list(found.values())
        absent = any(name not in cfg for cfg in configs)
        if all(is_number(v) for v in values):
            values.sort()
        params.append(
            Param(
                (name,),
                (*values, *([ABSENT] if absent else [])),
                ordered=not absent and all(is_number(v) for v in values),
            )
        )
    return tuple(params)


def as_space(configs: Space | Iterable[dict[str, Any]]) -> Space:
    """A :class:`Space` as it is; a list of configs as a :class:`ListSpace`."""
    return configs if isinstance(configs, Space) else ListSpace(configs)
