"""The tuning space: validate configs against the factory and give each a stable identity."""

from __future__ import annotations

import ast
import inspect
import json
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tileauto.errors import ConfigSpaceError
from tileauto.space.expression import BINARY, COMPARE, PythonError, keep, probe


def tunable_parameters(factory: Callable[..., Any]) -> dict[str, Any]:
    """Parameters of the factory that have defaults: the ones a config may set."""
    return {
        name: p.default
        for name, p in inspect.signature(factory).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def resolve_configs(
    configs: Any, factory: Callable[..., Any], args: tuple, kwargs: dict[str, Any]
) -> list[dict[str, Any]] | ProductSpace:
    """Turn ``configs`` (a list of dicts, a :class:`Space`, or a callable of the factory's
    arguments returning one) into a list, or a :class:`ProductSpace` kept as it is (lazy).

    A product is checked by its parameter names, never expanded; a product that sets a
    tunable the call passes explicitly is expanded, as a list would be, so that the call's
    value wins and each remaining config is tuned once.

    Raises:
        ConfigSpaceError: the space is empty, an entry is not a dict, or a key is not a
            parameter of the factory (all before anything compiles).
    """
    if callable(configs):
        try:
            produced = configs(*args, **kwargs)
        except TypeError as exc:
            raise ConfigSpaceError(
                f"configs is a callable but calling it with the kernel's arguments failed: {exc}; "
                f"it must accept the same arguments as the factory"
            ) from None
        configs = produced
    if isinstance(configs, ProductSpace):
        lazy = _checked_product(configs, factory, args, kwargs)
        if lazy is not None:
            return lazy
    if (
        configs is None
        or isinstance(configs, (str, bytes, dict))
        or not isinstance(configs, Iterable)
    ):
        raise ConfigSpaceError(
            f"configs must be a list of dicts (or a callable returning one), got {type(configs).__name__}"
        )
    items = list(configs)
    if not items:
        raise ConfigSpaceError("the config space is empty: configs produced no config to tune")
    params = inspect.signature(factory).parameters
    try:
        passed = set(inspect.signature(factory).bind_partial(*args, **kwargs).arguments)
    except TypeError as exc:
        raise ConfigSpaceError(
            f"the call does not fit {getattr(factory, '__qualname__', factory)}: {exc}"
        ) from None
    name = getattr(factory, "__qualname__", repr(factory))
    for i, cfg in enumerate(items):
        if not isinstance(cfg, dict):
            raise ConfigSpaceError(
                f"configs[{i}] must be a dict of parameter values, got {type(cfg).__name__}: {cfg!r}"
            )
        if PASS_CONFIGS in cfg and not (
            isinstance(cfg[PASS_CONFIGS], dict)
            and all(isinstance(k, str) for k in cfg[PASS_CONFIGS])
        ):
            raise ConfigSpaceError(
                f"configs[{i}]['pass_configs'] must be a dict of TVM pass options, "
                f"got {cfg[PASS_CONFIGS]!r}"
            )
        unknown = [k for k in cfg if k not in params and k != PASS_CONFIGS]
        if unknown:
            raise ConfigSpaceError(
                f"configs[{i}] = {cfg!r} sets {unknown}, which {'is' if len(unknown) == 1 else 'are'} not "
                f"a parameter of {name}{inspect.signature(factory)}"
            )
        for k, v in cfg.items():
            problem = _not_plain(v)
            if problem is not None:
                raise ConfigSpaceError(
                    f"configs[{i}][{k!r}] is {problem}: config values must be plain data (None, "
                    "bool, int, float, str, or lists, tuples and dicts of them), because the best "
                    "config is stored as JSON and must come back equal from the cache; pass a name "
                    "(a string) and look the function or object up inside the factory"
                )
    # A tunable the call passes explicitly is fixed to that value, as in TileLang: the configs
    # keep only the rest, each distinct remainder once, in the order of the list.
    remainders: dict[str, dict[str, Any]] = {}
    for cfg in items:
        rest = {k: _plain(v) for k, v in cfg.items() if k not in passed}
        remainders.setdefault(config_id(rest), rest)
    return list(remainders.values())


def _checked_product(
    space: ProductSpace, factory: Callable[..., Any], args: tuple, kwargs: dict[str, Any]
) -> ProductSpace | None:
    """The product when its names are tunables the call leaves open; None to expand it."""
    params = inspect.signature(factory).parameters
    name = getattr(factory, "__qualname__", repr(factory))
    unknown = [n for n in space.names if n not in params]
    if unknown:
        raise ConfigSpaceError(
            f"the space sets {unknown}, which {'is' if len(unknown) == 1 else 'are'} not "
            f"a parameter of {name}{inspect.signature(factory)}"
        )
    try:
        passed = set(inspect.signature(factory).bind_partial(*args, **kwargs).arguments)
    except TypeError as exc:
        raise ConfigSpaceError(f"the call does not fit {name}: {exc}") from None
    if passed & set(space.names):
        return None
    if len(space) == 0:
        raise ConfigSpaceError(
            f"the config space is empty: its constraints pruned every config ({space.pruned})"
        )
    return space


def _not_plain(value: Any) -> str | None:
    """Why a config value cannot round-trip through JSON, or None when it can."""
    if value is None or isinstance(value, (bool, str, numbers.Integral, numbers.Real)):
        if isinstance(value, numbers.Real) and not isinstance(value, (int, float)):
            if not hasattr(value, "item"):  # numpy scalars are converted; others are not
                return f"a {type(value).__name__}"
        return None
    if isinstance(value, (list, tuple)):
        return next((p for p in map(_not_plain, value) if p is not None), None)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return "a dict with keys that are not strings"
        return next((p for p in map(_not_plain, value.values()) if p is not None), None)
    what = getattr(value, "__qualname__", None) or type(value).__qualname__
    module = getattr(value, "__module__", None) or type(value).__module__
    return f"{'a function' if callable(value) else 'an object'} ({module}.{what})"


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (TVM and JSON take those only)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if not isinstance(value, (bool, int, float)) and isinstance(value, numbers.Number):
        return value.item() if hasattr(value, "item") else value
    return value


PASS_CONFIGS = "pass_configs"  # a config may carry TVM pass options of its own


def split_pass_configs(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A config's factory arguments, and its own ``pass_configs`` (None when it has none)."""
    if PASS_CONFIGS not in config:
        return config, None
    rest = {k: v for k, v in config.items() if k != PASS_CONFIGS}
    own = config[PASS_CONFIGS]  # None in a filled config that sets none of its own
    return rest, (dict(own) if own else None)


def merged_pass_configs(base: dict[str, Any] | None, own: dict[str, Any] | None) -> Any:
    """The call's ``pass_configs`` with a config's own merged over them."""
    if not own:
        return base
    return {**(base or {}), **own}


PRUNE_KEYS = ("early_config_prune", "perf_model", "top_k")


def check_prune_configs_by(prune: Any) -> None:
    """Check Triton's ``prune_configs_by`` dict at the call.

    Raises:
        ValueError: an unknown key, a non-callable function or a bad ``top_k`` (named).
    """
    if prune is None:
        return
    if not isinstance(prune, dict):
        raise ValueError(
            f"prune_configs_by must be a dict with keys {PRUNE_KEYS}, got {type(prune).__name__}"
        )
    unknown = sorted(set(prune) - set(PRUNE_KEYS))
    if unknown:
        raise ValueError(f"prune_configs_by has unknown keys {unknown}; it takes {PRUNE_KEYS}")
    for name in ("early_config_prune", "perf_model"):
        if prune.get(name) is not None and not callable(prune[name]):
            raise ValueError(f"prune_configs_by[{name!r}] must be callable")
    top_k = prune.get("top_k")
    if prune.get("perf_model") is not None:
        is_int = isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1
        is_fraction = isinstance(top_k, float) and 0.0 < top_k <= 1.0
        if not (is_int or is_fraction):
            raise ValueError(
                "prune_configs_by['top_k'] must be an int >= 1 or a fraction in (0, 1] when a "
                f"perf_model is given, got {top_k!r}"
            )


def prune_space(
    space: list[dict[str, Any]],
    prune: dict[str, Any] | None,
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
) -> list[dict[str, Any]]:
    """Triton's pruning: ``early_config_prune`` first, then the ``perf_model``'s ``top_k``.

    ``early_config_prune(configs, named_args, **kwargs)`` returns the configs to keep (a
    sublist): ``named_args`` maps the positional arguments to their names and the keyword
    arguments come as ``**kwargs``, as in Triton. ``perf_model(**args, **kwargs, **config)``
    estimates a config's time, and the ``top_k`` lowest estimates of what the early prune kept
    are kept. A fractional ``top_k`` is a share of what the early prune kept, and keeps at
    least one config.

    Raises:
        ConfigSpaceError: pruning left nothing, or returned configs that are not in the space.
    """
    if not prune:
        return space
    signature = inspect.signature(factory)
    named = dict(signature.bind_partial(*args, **kwargs).arguments)
    positional = dict(signature.bind_partial(*args).arguments)
    kept = list(space)
    early = prune.get("early_config_prune")
    if early is not None:
        kept = _early_pruned(early([dict(c) for c in kept], positional, **kwargs), space)
    model = prune.get("perf_model")
    if model is not None:
        top_k = prune["top_k"]
        k = max(1, int(len(kept) * top_k)) if isinstance(top_k, float) else top_k
        if len(kept) > k:
            estimate = {config_id(c): _estimate(model, named, c) for c in kept}
            kept = sorted(kept, key=lambda c: estimate[config_id(c)])[:k]
    return kept


def _early_pruned(returned: Any, space: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``early_config_prune`` returned, checked: a non-empty sublist of the space."""
    if isinstance(returned, (str, bytes, dict)) or not isinstance(returned, Iterable):
        raise ConfigSpaceError(
            "prune_configs_by['early_config_prune'] must return a list of the configs (dicts) "
            f"it was given, got {type(returned).__name__}"
        )
    kept = list(returned)
    for config in kept:
        if not isinstance(config, dict):
            raise ConfigSpaceError(
                "prune_configs_by['early_config_prune'] must return a list of the configs "
                f"(dicts) it was given; its list holds {type(config).__name__} {config!r}"
            )
    known = {config_id(c) for c in space}
    strangers = [c for c in kept if config_id(c) not in known]
    if strangers:
        raise ConfigSpaceError(
            f"early_config_prune returned configs that are not in the space: {strangers[:3]}"
        )
    if not kept:
        raise ConfigSpaceError(
            "prune_configs_by left no config to tune: early_config_prune returned an empty "
            "list; it must keep at least one of the configs it is given"
        )
    return [dict(c) for c in kept]


def _estimate(model: Callable[..., Any], named: dict[str, Any], config: dict[str, Any]) -> float:
    """``perf_model``'s estimate for one config, as a number to sort by."""
    value = model(**{**named, **config})
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigSpaceError(
            f"prune_configs_by['perf_model'] must return an estimated time (a number), got "
            f"{value!r} for config {config}"
        ) from None


def materialize(configs: Any) -> Any:
    """A one-shot iterator (a generator) of configs, read once into a list; else unchanged.

    A generator would be used up by the first tuning and be empty for the next call.
    """
    if isinstance(configs, Iterator):
        return list(configs)
    return configs


def config_id(config: dict[str, Any]) -> str:
    """A stable text identity of a config (sorted JSON)."""
    return json.dumps(config, sort_keys=True, default=repr)


def baseline_config(
    configs: Sequence[dict[str, Any]] | Space, defaults: dict[str, Any], keys: Iterable[str]
) -> dict[str, Any]:
    """The default config, filled: the factory's defaults, or the first config of the list.

    A tunable without a default (TileLang style, ``def kernel(threads): ...``) has no default
    config to compare with, so the first config of the list stands in for it.
    """
    keys = set(keys)
    if keys - set(defaults) and configs:
        return full_config(configs[0], defaults, keys)
    return full_config({}, defaults, keys)


def full_config(
    config: dict[str, Any], defaults: dict[str, Any], keys: Iterable[str]
) -> dict[str, Any]:
    """The config with factory defaults filled in for every tuned key."""
    return {k: config.get(k, defaults.get(k)) for k in sorted(set(keys))}


# -- the public space builder -------------------------------------------------------------------
#
# A :class:`Space` is a sequence of configs that is never expanded into dicts up front: a
# product of parameter values is decoded from an index (mixed radix, the first parameter most
# significant, as ``itertools.product``), and its constraints are applied once, over the whole
# product, in vectorized chunks that keep only the offsets of the valid configs in their chunk
# (2 bytes per valid config, no dicts). numpy is imported inside the functions that need it,
# so importing this module stays cheap for the command line and the cache.

if TYPE_CHECKING:
    from numpy.typing import NDArray

_CHUNK = 1 << 16  # configs checked at once by a constraint scan (an offset in one fits a uint16)
MAX_CONSTRAINED_PRODUCT = 1 << 27  # products up to this size may carry constraints (a scan)


class _Absent:
    """The value of a parameter that a config of a list does not set."""

    def __repr__(self) -> str:
        return "<not set>"


_ABSENT: Any = _Absent()


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
        vals = tuple(_plain(v) for v in values)
        if not vals:
            raise ConfigSpaceError(f"parameter {label!r} has no values: give at least one")
        for v in vals:
            problem = _not_plain(v)
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
        ordered = len(names) == 1 and all(_is_number(v) for v in vals)
        return cls(names, vals, ordered)

    @property
    def name(self) -> str:
        """The name, or the tied names joined by ", "."""
        return ", ".join(self.names)

    def assign(self, code: int) -> dict[str, Any]:
        """The config entries of the value at position ``code``."""
        value = self.values[code]
        if len(self.names) == 1:
            return {} if value is _ABSENT else {self.names[0]: value}
        return dict(zip(self.names, value))

    def columns(self) -> dict[str, NDArray[Any]]:
        """Each name's values as an array indexed by value position (for vectorized checks)."""
        if len(self.names) == 1:
            return {self.names[0]: _array([None if v is _ABSENT else v for v in self.values])}
        return {n: _array([v[k] for v in self.values]) for k, n in enumerate(self.names)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numpy() -> Any:
    import numpy

    return numpy


def _array(values: list[Any]) -> NDArray[Any]:
    """Values as an array: ints (within int64), floats, bools and strings keep their dtype;
    anything else, mixed ints and floats included, is an object (exact, as Python holds it)."""
    np = _numpy()
    kinds = {type(v) for v in values}
    if kinds <= {int} and all(-(1 << 63) < v < 1 << 63 for v in values):
        return np.array(values, dtype=np.int64)
    if kinds <= {float} or kinds <= {bool}:
        return np.array(values)
    if kinds <= {str} and not any(v.endswith("\0") for v in values):  # numpy drops trailing NULs
        return np.array(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


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

    def find(self, config: dict[str, Any]) -> int:
        """The index of ``config`` (a dict with a value for every parameter), or -1.

        Keys that are not parameters of the space are ignored; a missing key or a value that
        is not one of its parameter's values gives -1.
        """
        lookup = self.__dict__.get("_value_codes")
        if lookup is None:  # value -> position, per parameter (an absent value keys as "")
            lookup = [
                {"" if v is _ABSENT else config_id({"v": v}): k for k, v in enumerate(p.values)}
                for p in self.params
            ]
            self.__dict__["_value_codes"] = lookup
        row = []
        for p, codes in zip(self.params, lookup):
            if len(p.names) == 1:
                value = config.get(p.names[0], _ABSENT)
            else:
                value = tuple(config.get(n, _ABSENT) for n in p.names)
            code = codes.get("" if value is _ABSENT else config_id({"v": _plain(value)}), -1)
            if code < 0:
                return -1
            row.append(code)
        return int(self.index_of(_numpy().asarray([row], dtype=_numpy().int64))[0])

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
        return f"{type(self).__name__}({len(self)} configs: {params})"

    @staticmethod
    def from_configs(
        configs: Iterable[dict[str, Any]], params: Sequence[Param] | None = None
    ) -> ListSpace:
        """A space of the given configs, in order; each parameter's values inferred from them
        (numbers sorted, other values in order of appearance) unless ``params`` are given."""
        return ListSpace(configs, params)


def _radix(sizes: Sequence[int]) -> list[int]:
    """Place values of a mixed-radix number whose first digit is the most significant."""
    out, acc = [], 1
    for s in reversed(sizes):
        out.append(acc)
        acc *= s
    return out[::-1]


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
        self._radix = _radix(self._sizes)
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
        np = _numpy()
        idx = np.asarray(indices, dtype=np.int64)
        positions = self._positions(idx) if self.rules else idx
        return self._decode(positions)

    def index_of(self, codes: NDArray[Any]) -> NDArray[Any]:
        np = _numpy()
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
        np = _numpy()
        radix = np.asarray(self._radix, dtype=np.int64)
        sizes = np.asarray(self._sizes, dtype=np.int64)
        return (np.asarray(positions, dtype=np.int64)[:, None] // radix) % sizes

    def _index(self) -> tuple[NDArray[Any], NDArray[Any]]:
        """The valid configs, found once: each one's offset in its chunk of the product
        (uint16), and how many valid configs come before each chunk (one more entry: all)."""
        if self._valid is None or self._starts is None:
            self._valid, self._starts, self._pruned = self._scan()
        return self._valid, self._starts

    def _positions(self, indices: Sequence[int] | NDArray[Any]) -> NDArray[Any]:
        """The product positions of valid configs by index."""
        np = _numpy()
        valid, starts = self._index()
        idx = np.asarray(indices, dtype=np.int64)
        chunk = np.searchsorted(starts, idx, side="right") - 1
        return chunk * _CHUNK + valid[idx].astype(np.int64)

    def _scan(self) -> tuple[NDArray[Any], NDArray[Any], dict[str, int]]:
        np = _numpy()
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


class ListSpace(Space):
    """A space given as a list of configs (the configs are kept; their codes are computed)."""

    def __init__(self, configs: Iterable[dict[str, Any]], params: Sequence[Param] | None = None):
        np = _numpy()
        self._configs = [dict(c) for c in configs]
        self.params = tuple(params) if params is not None else _infer_params(self._configs)
        lookup = [{config_id({"v": v}): k for k, v in enumerate(p.values)} for p in self.params]
        codes = np.zeros((len(self._configs), len(self.params)), dtype=np.int64)
        for i, cfg in enumerate(self._configs):
            for j, p in enumerate(self.params):
                value = (
                    cfg.get(p.names[0], _ABSENT)
                    if len(p.names) == 1
                    else tuple(cfg.get(n) for n in p.names)
                )
                code = lookup[j].get(config_id({"v": value}))
                if code is None:
                    raise ConfigSpaceError(
                        f"config {i} = {cfg!r} sets {p.name} to {value!r}, which is not one of "
                        f"its values {list(p.values)}"
                    )
                codes[i, j] = code
        self._codes = codes
        self._sizes = [len(p.values) for p in self.params]
        self._radix = _radix(self._sizes)
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
        np = _numpy()
        return self._codes[np.asarray(indices, dtype=np.int64)]

    def index_of(self, codes: NDArray[Any]) -> NDArray[Any]:
        np = _numpy()
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
            names.setdefault(k, {}).setdefault(config_id({"v": v}), v)
    params = []
    for name, found in names.items():
        values = list(found.values())
        absent = any(name not in cfg for cfg in configs)
        if all(_is_number(v) for v in values):
            values.sort()
        params.append(
            Param(
                (name,),
                (*values, *([_ABSENT] if absent else [])),
                ordered=not absent and all(_is_number(v) for v in values),
            )
        )
    return tuple(params)


def as_space(configs: Space | Iterable[dict[str, Any]]) -> Space:
    """A :class:`Space` as it is; a list of configs as a :class:`ListSpace`."""
    return configs if isinstance(configs, Space) else ListSpace(configs)


# -- constraints ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraint:
    """A rule a config must satisfy: an expression over parameter names, or a callable.

    Attributes:
        name: how the report names it (the expression, or the callable's qualified name).
        source: what was given (the text or the callable).
        expression: the parsed expression (None for a callable).
    """

    name: str
    source: Any
    expression: ast.expr | None
    _results: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, rule: Any, names: Sequence[str]) -> Constraint:
        """Check a rule against the parameter names.

        Raises:
            ConfigSpaceError: a rule that is neither text nor callable, text that is not a
                safe expression, or a name that is not a parameter.
        """
        if isinstance(rule, Constraint):
            rule = rule.source
        if callable(rule):
            return cls(getattr(rule, "__name__", None) or repr(rule), rule, None)
        if not isinstance(rule, str):
            raise ConfigSpaceError(
                f"a constraint is an expression (str) or a callable of a "
                f"config, got {type(rule).__name__}: {rule!r}"
            )
        try:
            tree = ast.parse(rule.strip(), mode="eval").body
        except SyntaxError as exc:
            raise ConfigSpaceError(f"constraint {rule!r} is not an expression: {exc.msg}") from None
        _check_expression(tree, rule, set(names))
        return cls(rule.strip(), rule, tree)

    def check(self, config: dict[str, Any]) -> bool:
        """Whether one config satisfies the rule."""
        if self.expression is None:
            try:
                return bool(self.source(dict(config)))
            except Exception as exc:
                raise ConfigSpaceError(
                    f"constraint {self.name} raised {type(exc).__name__}: {exc} for config "
                    f"{config!r}; a constraint must return True (keep) or False (prune)"
                ) from exc
        columns = {k: _array([v]) for k, v in config.items()}
        return bool(self.check_columns(columns, 1)[0])

    def check_columns(self, columns: dict[str, NDArray[Any]], n: int) -> NDArray[Any]:
        """Whether each of ``n`` configs, given as one array per name, satisfies the expression.

        The result is Python's ``bool(expression)`` for each config (exact integers, strings
        compared as Python compares them), except that a config on which Python would raise
        ``ZeroDivisionError`` is pruned, so ``"b != 0 and a % b == 0"`` reads as in Python.

        Raises:
            ConfigSpaceError: Python raises anything else for one of the configs.
        """
        assert self.expression is not None
        try:
            return keep(self.expression, columns, n, self._results)
        except PythonError as exc:
            raise self._refused(exc) from None

    def probe(self, params: Sequence[Param]) -> None:
        """Evaluate the expression on a config of each combination of value types of
        ``params``, so that a type error (``"layout > 1"`` with string layouts) is raised at
        ``product()``, naming the constraint and the config.

        Raises:
            ConfigSpaceError: Python raises, for such a config, anything but ZeroDivisionError.
        """
        if self.expression is None:
            return
        # a value a config does not set reads as None, as in the scan's columns
        groups = [[p.assign(c) or {p.names[0]: None} for c in range(len(p.values))] for p in params]
        try:
            probe(self.expression, groups)
        except PythonError as exc:
            raise self._refused(exc) from None

    def _refused(self, exc: PythonError) -> ConfigSpaceError:
        return ConfigSpaceError(
            f"constraint {self.name!r} cannot be evaluated for {exc.env!r}: Python raises "
            f"{type(exc.error).__name__}: {exc.error}; a constraint must evaluate, as Python "
            'would, for every config of the product (guard it: "b != 0 and a % b == 0"), '
            "or be a callable of the config"
        )


def _check_expression(node: ast.AST, text: str, names: set[str]) -> None:
    """Allow names, constants, arithmetic, comparisons, and/or/not; nothing else."""
    allowed = (
        ast.Name,
        ast.Constant,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.Tuple,
        ast.List,
        ast.Set,
        ast.Load,
        ast.And,
        ast.Or,
        ast.Not,
        ast.USub,
        ast.UAdd,
        ast.In,
        ast.NotIn,
        *BINARY,
        *COMPARE,
    )
    for sub in ast.walk(node):
        if not isinstance(sub, allowed):
            raise ConfigSpaceError(
                f"constraint {text!r} uses {type(sub).__name__}, which a constraint expression "
                "may not: use parameter names, numbers, strings, + - * / // % **, comparisons, "
                "in, and/or/not; pass a callable of the config for anything else"
            )
        if isinstance(sub, ast.Name) and sub.id not in names:
            raise ConfigSpaceError(
                f"constraint {text!r} names {sub.id!r}, which is not a "
                f"parameter; the parameters are {sorted(names)}"
            )
        if isinstance(sub, (ast.Tuple, ast.List, ast.Set)) and not all(
            isinstance(e, ast.Constant) for e in sub.elts
        ):
            raise ConfigSpaceError(f"constraint {text!r}: a list after 'in' holds constants only")
        if isinstance(sub, ast.Compare):
            for op, right in zip(sub.ops, sub.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) != isinstance(
                    right, (ast.Tuple, ast.List, ast.Set)
                ):
                    raise ConfigSpaceError(
                        f"constraint {text!r}: 'in' takes a list of "
                        "constants on its right, and only 'in' does"
                    )
