"""The tuning space: validate configs against the factory and give each a stable identity."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable
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
        unknown = [k for k in cfg if k not in params]
        if unknown:
            raise ConfigSpaceError(
                f"configs[{i}] = {cfg!r} sets {unknown}, which {'is' if len(unknown) == 1 else 'are'} not "
                f"a parameter of {name}{inspect.signature(factory)}"
            )
        fixed = [k for k in cfg if k in passed]
        if fixed:
            raise ConfigSpaceError(
                f"configs[{i}] sets {fixed}, which the call already passes explicitly"
            )
    return [dict(c) for c in items]


def config_id(config: dict[str, Any]) -> str:
    """A stable text identity of a config (sorted JSON)."""
    return json.dumps(config, sort_keys=True, default=repr)


def full_config(
    config: dict[str, Any], defaults: dict[str, Any], keys: Iterable[str]
) -> dict[str, Any]:
    """The config with factory defaults filled in for every tuned key."""
    return {k: config.get(k, defaults.get(k)) for k in sorted(set(keys))}
