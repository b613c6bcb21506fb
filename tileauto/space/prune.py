"""Triton's ``prune_configs_by``: checked at the call, applied to a list of configs."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from tileauto.errors import ConfigSpaceError
from tileauto.space._values import config_id

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
        estimate = float(value)
        if estimate != estimate:  # NaN sorts anywhere: the top_k would be arbitrary
            raise ValueError
        return estimate
    except (TypeError, ValueError):
        raise ConfigSpaceError(
            f"prune_configs_by['perf_model'] must return an estimated time (a number), got "
            f"{value!r} for config {config}"
        ) from None
