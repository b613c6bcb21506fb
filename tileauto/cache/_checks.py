"""Which checks a measurement passed, and which checks are at least as strict as which.

A tuning's measurements are kept per set of checks (:mod:`tileauto.cache.tuning`); a tuning
under other checks takes what another's measured only where its own checks could not judge
otherwise: a pass under checks at least as strict, a failure to compile (no check runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tileauto.cache import folders
from tileauto.cache.key import digest
from tileauto.records import TrialStatus

# The profile options that decide whether a config passes, not how it is timed.
CHECK_OPTIONS = (
    "ref_prog",
    "manual_check_prog",
    "skip_check",
    "rtol",
    "atol",
    "max_mismatched_ratio",
)
# What a tuning may take from one under other checks: a pass under checks at least as strict
# (a looser check passes it too), and a failure to compile (no check ran).
PASSED = frozenset({TrialStatus.OK})
CHECK_FREE = frozenset({TrialStatus.COMPILE_ERROR, TrialStatus.COMPILE_CRASH})
EARLIER_CHECKS = "measured by an earlier tuning checked"  # a lent trial's note starts so


def checks_record(checks: dict[str, Any]) -> dict[str, Any]:
    """The checks of a tuning as its measurements' folder records them: programs by the digest
    of everything they reach (their fingerprint), the rest by value."""
    out = dict(checks)
    for name in ("ref_prog", "manual_check_prog"):
        if out.get(name) is not None:
            out[name] = digest(out[name])
    return out


def at_least_as_strict(earlier: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a config that passed ``earlier``'s checks passes ``now``'s (both
    :func:`checks_record` s): ``now`` checks nothing; or both run the same manual check (or
    none), compared with the same reference (the same ``ref_prog``, or both none: the default
    config's outputs), with tolerances no looser.

    A pass against a ``ref_prog`` says nothing of a tuning without one: it compares with the
    default config's outputs, which the program may not give (a wrong default, a program that
    only checks, a reference the user dropped because it was wrong)."""
    if now.get("skip_check"):
        return True
    if earlier.get("skip_check") or earlier.get("manual_check_prog") != now.get(
        "manual_check_prog"
    ):
        return False
    if earlier.get("ref_prog") != now.get("ref_prog"):
        return False
    try:
        return all(
            float(earlier[t]) <= float(now[t]) for t in ("rtol", "atol", "max_mismatched_ratio")
        )
    except (KeyError, TypeError, ValueError):
        return False


def describe_checks(checks: dict[str, Any]) -> str:
    """How a config was checked, in words (for a reused trial's note)."""
    if checks.get("skip_check"):
        return "with no check"
    against = (
        "against a reference program" if checks.get("ref_prog") else "against the default config"
    )
    how = " with a manual check" if checks.get("manual_check_prog") else ""
    return (
        f"{against}{how} (rtol {checks.get('rtol')}, atol {checks.get('atol')}, "
        f"max_mismatched_ratio {checks.get('max_mismatched_ratio')})"
    )


def read_checks(path: Path) -> dict[str, Any] | None:
    """A checks record of this user's (a plain file nobody else can write), or None."""
    data = folders.read_own_json(path)
    return data if isinstance(data, dict) else None
