"""A config's own TVM ``pass_configs``: split from its factory arguments, merged over the call's."""

from __future__ import annotations

from typing import Any

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
