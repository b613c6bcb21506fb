"""What a session says when it ends: the facts kept with the entry, the message when nothing
passed, and how many configs were never tried."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from typing import Any

from tileauto.cache.entry import compile_args_record
from tileauto.records import Trial, Validation, is_never_tried
from tileauto.report.table import failure_summary, format_config
from tileauto.settings import Settings
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


def tuning_off_variable(environ: Mapping[str, str] | None = None) -> str:
    """The variable that turns tuning off, as set (``DISABLE_AUTOTUNE=1``): the one the
    settings read, so a message names what the user set, not a name they never used."""
    environ = os.environ if environ is None else environ
    field = next(f for f in dataclasses.fields(Settings) if f.name == "disable_autotune")
    names = (field.metadata["env"], *field.metadata["also"])
    given = [(n, environ[n]) for n in names if n in environ]
    # as the settings choose: an empty one leaves the place to an alias that is set
    given = [g for g in given if g[1].strip()] or given[:1]
    name, raw = given[0] if given else (names[0], "1")
    return f"{name}={raw.strip()}"


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
    default config alone (``TILEAUTO_DISABLE_AUTOTUNE`` or its alias), which is said, not counted as the
    user's configs."""
    if tuning_off:
        return (
            f"autotune {name}: tuning is off ({tuning_off_variable()}) and the default "
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


def warn_if_unchecked(problem: TuningProblem, default_trial: Trial, passed: list[Trial]) -> None:
    """Say so, once per tuning, when the configs that passed were checked against nothing:
    without a ref_prog the default config's results are the reference, and it failed (a
    TileLang ``block=None`` default that does not compile, say), so a wrong config may win."""
    pa = problem.profile_args
    if pa.skip_check or pa.ref_prog is not None or default_trial.ok:
        return
    unchecked = [t for t in passed if t.validation is Validation.SKIPPED]
    if not unchecked or problem.settings.disable_autotune:
        return
    reason = default_trial.reason
    reason = reason if len(reason) <= 160 else reason[:157] + "..."
    warnings.warn(
        f"autotune {problem.name}: the default config {format_config(default_trial.config)} "
        f"failed ({reason}) and no ref_prog was given, so the other configs' results could "
        f"not be checked against anything ({len(unchecked)} passed unchecked: their trials say "
        "validation 'skipped') and a wrong config may win; give a ref_prog, or a default "
        "config that passes (a tunable without a default, or defaulting to None, makes the "
        "first config the default config)",
        RuntimeWarning,
        stacklevel=2,
    )


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
        from tileauto.search.loop import prior_facts_of  # with the search that ran

        # the records a guided search started from, as the search ran (AutoSearch under a
        # max_trials runs a copy of itself sized to it: the facts are the copy's)
        ran = getattr(stop, "strategy", None)
        prior = prior_facts_of(ran if ran is not None else search)
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
