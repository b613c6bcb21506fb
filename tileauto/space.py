"""The tuning space: validate configs against the factory and give each a stable identity."""

from __future__ import annotations

import inspect
import json
import numbers
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tileauto.errors import ConfigSpaceError


def tunable_parameters(factory: Callable[..., Any]) -> dict[str, Any]:
    """Parameters of the factory that have defaults: the ones a config may set."""
    return {
        name: p.default
        for name, p in inspect.signature(factory).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def resolve_configs(
    configs: Any, factory: Callable[..., Any], args: tuple, kwargs: dict[str, Any]
) -> list[dict[str, Any]]:
    """Turn ``configs`` (a list of dicts, or a callable of the factory's arguments) into a list.

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
    sublist); ``perf_model(**named_args, **config)`` estimates a config's time, and the
    ``top_k`` lowest estimates of what the early prune left are kept. A fractional ``top_k``
    is a share of the whole space, and keeps at least one config.

    Raises:
        ConfigSpaceError: pruning left nothing, or returned configs that are not in the space.
    """
    if not prune:
        return space
    named = dict(inspect.signature(factory).bind_partial(*args, **kwargs).arguments)
    kept = list(space)
    early = prune.get("early_config_prune")
    if early is not None:
        kept = [dict(c) for c in early([dict(c) for c in kept], dict(named), **kwargs)]
        known = {config_id(c) for c in space}
        strangers = [c for c in kept if config_id(c) not in known]
        if strangers:
            raise ConfigSpaceError(
                f"early_config_prune returned configs that are not in the space: {strangers[:3]}"
            )
    model = prune.get("perf_model")
    if model is not None:
        top_k = prune["top_k"]
        k = max(1, int(len(space) * top_k)) if isinstance(top_k, float) else top_k
        if len(kept) > k:
            estimate = {config_id(c): model(**{**named, **c}) for c in kept}
            kept = sorted(kept, key=lambda c: estimate[config_id(c)])[:k]
    if not kept:
        raise ConfigSpaceError("prune_configs_by left no config to tune")
    return kept


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
    configs: list[dict[str, Any]], defaults: dict[str, Any], keys: Iterable[str]
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
