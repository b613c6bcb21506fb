"""What a session says when it ends: the facts kept with the entry, the message when nothing
passed, and how many configs were never tried."""

from __future__ import annotations

from typing import Any

from tileauto.cache.entry import compile_args_record
from tileauto.records import Trial, is_never_tried
from tileauto.report.table import failure_summary, format_config
from tileauto.space.view import SpaceView
from tileauto.tune.problem import TuningProblem


def never_listed(view: SpaceView, stop: Any, trials: tuple[Trial, ...]) -> int | None:
    """How many configs of a large product were never tried (they have no trial); None for a
    constrained product the search did not scan to its end (never counted)."""
    if stop is None or view.lists_never_tried():
        return 0
    if not view.counted:
        return None
    return max(0, len(view) - sum(t.index >= 0 for t in trials))


def no_winner_message(
    name: str,
    trials: tuple[Trial, ...],
    default_trial: Trial,
    view: SpaceView,
    stop: Any,
    *,
    tuning_off: bool = False,
) -> str:
    """NoValidConfigError's message: the measured configs' failures; configs a budget left
    untried are counted apart, as they are not failures. ``tuning_off``: the space is the
    default config alone (``TILEAUTO_DISABLE_AUTOTUNE``), which is said, not counted as the
    user's configs."""
    if tuning_off:
        return (
            f"autotune {name}: tuning is off (TILEAUTO_DISABLE_AUTOTUNE=1) and the default "
            f"config {format_config(default_trial.config)} did not pass: "
            f"{default_trial.reason}; fix the factory's defaults, or unset the variable to tune"
        )
    measured = sum(not is_never_tried(t) for t in trials)
    never = never_listed(view, stop, trials)
    stopped = stop.describe().partition(";")[0] if stop is not None else ""
    if never is None:  # not counted: say so rather than scan the rest of the product now
        head = f"none of the {measured} measured configs passed; the rest of the space was "
        head += f"never tried ({stopped})" if stopped else "never tried"
        return f"autotune {name}: {head}:\n{failure_summary(trials)}"
    size = len(trials) + never
    if measured == 0 and stopped:  # a budget spent before the search's first batch
        default = "passed" if default_trial.ok else f"failed: {default_trial.reason}"
        return (
            f"autotune {name}: no config of the {size} was measured ({stopped} before its "
            f"first batch: the tuning's setup and the default config, which {default}, took "
            "the budget); give a larger budget"
        )
    head = f"none of the {f'{measured} measured' if measured < size else size} configs passed"
    if not default_trial.ok and view.default_index < 0:
        head += f" (the default config: {default_trial.reason})"
    if measured < size:
        head += f"; the other {size - measured} of the {size} configs were never tried"
        head += f" ({stopped})" if stopped else ""
    return f"autotune {name}: {head}:\n{failure_summary(trials)}"


def stored_facts(problem: TuningProblem, search: Any, stop: Any) -> dict[str, Any]:
    """Plain facts kept with the entry: how the search ended (and, for a search with a prior,
    the prior's records it used and those it dropped, with why), the problem's call (which
    lets ``load_from_disk(factory=...)`` compile the winner elsewhere) and the compile
    arguments (which such a recompile builds with)."""
    extra: dict[str, Any] = {"compile_args": compile_args_record(problem.compile_args)}
    if stop is not None:
        extra["search"] = {
            "strategy": search.describe(),
            "stop_reason": stop.stop_reason.value,
            "measured": len(stop.trials),
            "never_tried": stop.never_tried,
            "pruned": problem.pruned,
        }
        facts = getattr(search, "prior_facts", None)  # the records a guided search started from
        prior = facts() if callable(facts) else None
        if prior is not None:
            extra["search"]["prior"] = prior
    call = {"args": list(problem.args), "kwargs": dict(problem.kwargs)}
    if _plain(call):
        extra["problem"] = call
    return extra


def _plain(value: Any) -> bool:
    """JSON's own values all the way down (what a stored problem call may hold)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return isinstance(value, (bool, int, float, str, type(None)))
