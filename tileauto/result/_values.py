"""The user's tuples in stored trials: JSON gives every tuple back as a list.

Imported by the ``tileauto`` command too, so it imports neither torch nor TVM.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any


def with_own_values(
    trials: tuple[Any, ...], default: Any, best: dict[str, Any]
) -> tuple[tuple[Any, ...], Any]:
    """The stored trials and default trial with the winner's tuples: JSON made every tuple a
    list, and only the winner's config ``best`` kept its Python literal. A list where the
    winner's config holds a tuple (of the same parameter, in the same place) is that tuple's
    kind again, so a trial of the winner's config equals ``result.config``."""
    if json.loads(json.dumps(best, default=repr)) == best:
        return trials, default  # no tuple to give back

    def own(trial: Any) -> Any:
        config = {name: _like(value, best.get(name)) for name, value in trial.config.items()}
        return replace(trial, config=config) if config != trial.config else trial

    return tuple(own(t) for t in trials), own(default) if default is not None else None


def _like(value: Any, model: Any) -> Any:
    """``value`` as JSON gave it back, with ``model``'s tuples where ``value`` has lists."""
    if isinstance(value, list) and isinstance(model, (list, tuple)):
        items = [_like(v, m) for v, m in zip(value, model)] + value[len(model) :]
        return tuple(items) if isinstance(model, tuple) else items
    if isinstance(value, dict) and isinstance(model, dict):
        return {k: _like(v, model.get(k)) for k, v in value.items()}
    return value
