"""Config resolution: what ``configs=`` names, checked against the factory before any compile.

A list is checked entry by entry and kept as a list; a product is checked by its names and
kept lazy. Configs are then filled with the factory's defaults, and the default config found.
"""

from __future__ import annotations

import ast
import copy
import inspect
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from tileauto.errors import ConfigSpaceError
from tileauto.space._pass_configs import PASS_CONFIGS
from tileauto.space._values import config_id, not_plain, plain
from tileauto.space.product import ProductSpace
from tileauto.space.types import Space

_SCALARS = frozenset((int, float, str, bool, type(None)))  # plain as they are


class _DoesNotFit(TypeError):
    """A callable of the factory's arguments that cannot take this call's."""


def call_accepting(fn: Callable[..., Any], what: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` for a callable of the factory's arguments (``configs=``,
    ``key=``), given the keywords it has a parameter for: a tunable the call fixes
    (``matmul(M, N, K, threads=128)``) does not break ``lambda M, N, K: ...``. What ``fn``
    raises is raised as it is.

    Raises:
        TypeError: ``fn`` cannot take the call's arguments (named: ``what``).
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        return fn(*args, **kwargs)
    params = signature.parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        kwargs = {k: v for k, v in kwargs.items() if k in signature.parameters}
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise _DoesNotFit(
            f"{what} is a callable but it cannot take the kernel's arguments "
            f"{_shown(args, kwargs)}: {exc}; it must accept the factory's problem arguments"
        ) from None
    return fn(*args, **kwargs)


def call_configs(configs: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """What a callable ``configs=`` gives for the kernel's arguments.

    Raises:
        ConfigSpaceError: it cannot take them (what it raises itself is raised as it is).
    """
    try:
        return call_accepting(configs, "configs", args, kwargs)
    except _DoesNotFit as exc:
        raise ConfigSpaceError(str(exc)) from None


def _shown(args: tuple, kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = f"({', '.join(parts)})"
    return text if len(text) <= 120 else text[:117] + "...)"


def _named_only(factory: Callable[..., Any]) -> str:
    """The hint for a factory with ``**kwargs``: configs set its named parameters only."""
    params = inspect.signature(factory).parameters.values()
    var = [p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    if not var:
        return ""
    return (
        f"; a config sets named parameters of the factory, not its **{var[0]}: give each "
        "tunable a parameter with a default (the default config), as TileLang's autotuner asks"
    )


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

    A product is checked by its parameter names, never expanded. A tunable the call passes
    explicitly is fixed: a product drops that parameter, its expression constraints reading
    the call's value in place of the name, still lazy; only where that cannot be (the name is
    tied with others in one parameter, a callable constraint, a value an expression cannot
    hold) is the product expanded, as a list would be, each remaining config tuned once.

    Raises:
        ConfigSpaceError: the space is empty, an entry is not a dict, or a key is not a
            parameter of the factory (all before anything compiles).
        TypeError: a required argument (no default) that the call does not give is set by
            no config, or left out by one.
    """
    if callable(configs):
        configs = call_configs(configs, args, kwargs)
    if isinstance(configs, ProductSpace):
        lazy = _checked_product(configs, factory, args, kwargs)
        if lazy is not None:
            _check_complete(factory, args, kwargs, set(lazy.names))
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
                f"a parameter of {name}{inspect.signature(factory)}{_named_only(factory)}"
            )
        for k, v in cfg.items():
            if type(v) in _SCALARS:
                continue  # the common case, at no cost (a list of 10^5 configs)
            problem = not_plain(v)
            if problem is not None:
                raise ConfigSpaceError(
                    f"configs[{i}][{k!r}] is {problem}: config values must be plain data (None, "
                    "bool, int, float, str, or lists, tuples and dicts of them), because the best "
                    "config is stored as JSON and must come back equal from the cache; pass a name "
                    "(a string) and look the function or object up inside the factory"
                )
    # A tunable the call passes explicitly is fixed to that value, as in TileLang: the configs
    # keep only the rest, each distinct remainder once, in the order of the list. With none
    # fixed, the list stays as given (a config listed twice is measured once, and each trial's
    # index is its config's place in the list, as the report's `#` and the errors' [i] say).
    if not any(k in passed for cfg in items for k in cfg):
        _check_complete(factory, args, kwargs, {k for c in items for k in c}, items)
        return [
            dict(cfg) if all(type(v) in _SCALARS for v in cfg.values()) else _plain_config(cfg)
            for cfg in items
        ]
    remainders: dict[str, dict[str, Any]] = {}
    for cfg in items:
        rest = {
            k: v if type(v) in _SCALARS else plain(v) for k, v in cfg.items() if k not in passed
        }
        remainders.setdefault(config_id(rest), rest)
    _check_complete(factory, args, kwargs, {k for c in items for k in c}, items)
    return list(remainders.values())


def _plain_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A config with each value that is not a scalar made plain data (lists, tuples, dicts)."""
    return {k: v if type(v) in _SCALARS else plain(v) for k, v in cfg.items()}


def _check_complete(
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    tuned: set[str],
    configs: Sequence[dict[str, Any]] = (),
) -> None:
    """A required parameter that neither the call nor any config gives is the call's error,
    as a ``@jit`` call's (before anything compiles, not one compile error per config); so is
    one that some configs set and one of ``configs`` leaves out (it has no value to take).

    Raises:
        TypeError: naming the factory, its signature and the missing argument (and the
            config that leaves it out).
    """
    signature = inspect.signature(factory)
    given = signature.bind_partial(*args, **kwargs).arguments
    required = [
        name
        for name, p in signature.parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and name not in given
    ]
    name = getattr(factory, "__qualname__", repr(factory))
    missing = [k for k in required if k not in tuned]
    if missing:
        raise TypeError(
            f"{name}{signature}: missing a required argument: {missing[0]!r} (the call does "
            "not give it and no config sets it)"
        )
    for i, cfg in enumerate(configs):
        left_out = [k for k in required if k not in cfg]
        if left_out:
            raise TypeError(
                f"{name}{signature}: configs[{i}] = {cfg!r} does not set {left_out[0]!r}, "
                "which has no default (the call does not give it; other configs set it): "
                "set it in every config, or give the parameter a default"
            )


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
            f"a parameter of {name}{inspect.signature(factory)}{_named_only(factory)}"
        )
    try:
        passed = set(inspect.signature(factory).bind_partial(*args, **kwargs).arguments)
    except TypeError as exc:
        raise ConfigSpaceError(f"the call does not fit {name}: {exc}") from None
    fixed = passed & set(space.names)
    if fixed:
        bound = inspect.signature(factory).bind_partial(*args, **kwargs).arguments
        bound_space = _fixed_product(space, {n: bound[n] for n in fixed})
        if bound_space is None:
            return None
        space = bound_space
    if space.count_upto(1) == 0:  # a constrained product scans to its first valid config only
        raise ConfigSpaceError(
            f"the config space is empty: its constraints pruned every config ({space.pruned})"
        )
    return space


class _Unbound(Exception):
    """A fixed value that an expression constraint cannot hold as a constant."""


class _Bind(ast.NodeTransformer):
    """An expression with some names replaced by constants (the call's fixed values)."""

    def __init__(self, fixed: dict[str, Any]) -> None:
        self.fixed = fixed

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in self.fixed:
            return node
        value = self.fixed[node.id]
        if type(value) not in _SCALARS or (type(value) is float and not math.isfinite(value)):
            raise _Unbound(node.id)  # a tuple, a NaN: no constant of the expression language
        return ast.copy_location(ast.Constant(value), node)


def _fixed_product(space: ProductSpace, fixed: dict[str, Any]) -> ProductSpace | None:
    """``space`` without the parameters the call fixes, each expression constraint reading
    the call's value where it named one of them: lazy, as the product was. None where that
    cannot be: a fixed name tied with others in one parameter, a callable constraint (which
    names it reads is unknown), a value that is no constant of an expression, or nothing left
    to tune."""
    if any(len(p.names) > 1 and fixed.keys() & set(p.names) for p in space.params):
        return None
    params = [p for p in space.params if p.names[0] not in fixed]
    trees = [r.expression for r in space.rules]
    if not params or None in trees:
        return None
    try:
        rules = [
            ast.unparse(_Bind(fixed).visit(copy.deepcopy(tree)))
            if fixed.keys() & {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            else r.source
            for r, tree in zip(space.rules, trees)
            if tree is not None
        ]
        return ProductSpace(params, rules)
    except (_Unbound, ConfigSpaceError):
        return None


def materialize(configs: Any) -> Any:
    """A one-shot iterator (a generator) of configs, read once into a list; else unchanged.

    A generator would be used up by the first tuning and be empty for the next call.
    """
    if isinstance(configs, Iterator):
        return list(configs)
    return configs


def baseline_config(
    configs: Sequence[dict[str, Any]] | Space, defaults: dict[str, Any], keys: Iterable[str]
) -> dict[str, Any]:
    """The default config, filled: the factory's defaults, or the first config of the list.

    A tunable without a default (TileLang style, ``def kernel(threads): ...``) has no default
    config to compare with, so the first config of the list stands in for it. So does a
    tunable whose default is None and that the configs set (TileLang's ``block=None``: a
    placeholder the configs fill, which the factory cannot compile as it is).
    """
    keys = set(keys)
    nonempty = configs.count_upto(1) > 0 if isinstance(configs, Space) else bool(configs)
    valued = {k for k, v in defaults.items() if v is not None}
    if keys - valued - {PASS_CONFIGS} and nonempty:  # pass_configs: no parameter
        return full_config(configs[0], defaults, keys)
    return full_config({}, defaults, keys)


def full_config(
    config: dict[str, Any], defaults: dict[str, Any], keys: Iterable[str]
) -> dict[str, Any]:
    """The config with factory defaults filled in for every tuned key.

    A key with neither (``pass_configs``, which is no parameter of the factory) is left out,
    so that ``factory(**config)`` takes the config back; a required tunable a config leaves
    out is refused before this (:func:`resolve_configs`).
    """
    return {
        k: config[k] if k in config else defaults[k]
        for k in sorted(set(keys))
        if k in config or k in defaults
    }
