"""What ``on_trial`` observers are given: detached trials, bounded errors, validation, cache hits.

The session runs with scripted stages (no compile, no run worker); the same observer contract
on real LLVM kernels is in ``testing/integration/test_observer_cache_hits.py``.
"""

from __future__ import annotations

import logging
import threading

import pytest

from tileauto.records import Validation
from tileauto.testing import RecordingReporter, ScriptedBuilder, ScriptedRunner
from tileauto.tune.session import TuningSession
from tileauto.tune.stores import MemoryStore

SPACE = [{"block": 16}, {"block": 32}, {"block": 64}, {"block": 128}]
LATENCY = {16: 3.0, 32: 2.0, 64: 1.0, 128: 4.0}


def run(problem, *, script=None, fails=None, store=None):
    reporter = RecordingReporter()
    session = TuningSession(
        problem,
        builder=ScriptedBuilder(fails=fails),
        runner=ScriptedRunner(script or (lambda c: LATENCY[c["block"]])),
        store=store,
        reporter=reporter,
    )
    return session.run(), reporter


# -- a detached copy -----------------------------------------------------------------------------
def test_an_observer_that_changes_the_trials_config_does_not_change_the_tuning(problem):
    seen = []

    def meddle(trial):
        seen.append(dict(trial.config))
        trial.config["block"] = 999  # the user's copy: the session's config must not move
        trial.config["extra"] = 1

    result, reporter = run(problem(on_trial=meddle))
    assert result.config == {"block": 64}
    assert [t.config for t in result.trials] == SPACE
    assert sorted(c["block"] for c in seen) == [16, 32, 64, 128]  # each one seen, unchanged
    assert all(t.config["block"] != 999 for t in reporter.of("trial"))


# -- bounded error text --------------------------------------------------------------------------
def test_an_observer_is_given_an_error_cut_to_2048_characters_and_the_result_keeps_it(problem):
    long = "E" * 10_000
    seen = {}
    script = lambda c: ("crash", long) if c["block"] == 16 else LATENCY[c["block"]]  # noqa: E731

    result, _ = run(problem(on_trial=lambda t: seen.setdefault(t.index, t)), script=script)
    cut = seen[0].error
    assert len(cut) <= 2048
    assert cut.startswith("EEEE") and "cut: 10000 characters" in cut  # says that it was cut
    assert result.trials[0].error == long  # the record of the tuning keeps all of it
    assert seen[1].error is None  # a trial that passed has no error to cut


# -- a broken observer is reported once and switched off -----------------------------------------
def test_an_observer_that_raises_is_reported_once_and_then_switched_off(problem, caplog):
    calls = []

    def broken(trial):
        calls.append(trial.index)
        raise RuntimeError("dashboard down " + "x" * 5000)

    with caplog.at_level(logging.WARNING, logger="tileauto"):
        result, _ = run(problem(on_trial=broken))
    assert result.config == {"block": 64}  # tuning went on
    assert len(calls) == 1  # never called again after it raised
    warned = [r.getMessage() for r in caplog.records if "on_trial" in r.getMessage()]
    assert len(warned) == 1
    assert "RuntimeError: dashboard down" in warned[0] and "switched off" in warned[0]
    assert len(warned[0]) < 2048 + 400  # the callback's own message is bounded too


class Unshareable:
    """A config value that cannot be copied (a lock inside): its trial cannot be detached."""

    def __init__(self):
        self.lock = threading.Lock()

    def __repr__(self):
        return "Unshareable()"


def test_an_observer_whose_trial_cannot_be_copied_is_switched_off(problem, caplog):
    calls = []
    odd = Unshareable()
    space = [{"block": 16, "tag": odd}, {"block": 64, "tag": odd}]
    with caplog.at_level(logging.WARNING, logger="tileauto"):
        result, _ = run(
            problem(configs=space, on_trial=calls.append),
            script=lambda c: LATENCY[c["block"]],
        )
    assert result.config["block"] == 64  # tuning went on
    assert calls == []  # never handed the session's own trial instead
    warned = [r.getMessage() for r in caplog.records if "on_trial" in r.getMessage()]
    assert len(warned) == 1 and "switched off" in warned[0] and "copied" in warned[0]


# -- how each config was validated ---------------------------------------------------------------
def double(x):
    return x * 2


@pytest.mark.parametrize(
    ("profile", "others", "default"),
    [
        ({}, Validation.DEFAULT, Validation.SKIPPED),  # the default config is the reference
        ({"ref_prog": double}, Validation.REFERENCE, Validation.REFERENCE),
        ({"skip_check": True}, Validation.SKIPPED, Validation.SKIPPED),
        ({"skip_check": True, "ref_prog": double}, Validation.SKIPPED, Validation.SKIPPED),
        ({"manual_check_prog": lambda r, e: True}, Validation.DEFAULT, Validation.SKIPPED),
    ],
    ids=["default", "ref_prog", "skip_check", "skip_check+ref_prog", "manual_check"],
)
def test_each_trial_says_how_it_was_validated(problem, profile, others, default):
    seen = []
    result, _ = run(problem(on_trial=seen.append, **profile))
    by_block = {t.config["block"]: t for t in seen}
    assert by_block[32].validation is default  # 32 is the factory's default
    assert {by_block[b].validation for b in (16, 64, 128)} == {others}
    assert [t.validation for t in result.trials] == [by_block[b].validation for b in LATENCY]


def test_a_config_that_never_ran_was_not_validated_and_without_the_default_none_is(problem):
    fails = lambda c: "compile_error" if c["block"] in (32, 128) else None  # noqa: E731
    seen = []
    run(problem(on_trial=seen.append), fails=fails)
    by_block = {t.config["block"]: t for t in seen}
    assert by_block[128].validation is None and by_block[32].validation is None  # never ran
    # the default config (32) did not build: the others had no reference outputs
    assert by_block[16].validation is by_block[64].validation is Validation.SKIPPED


# -- a cache hit is a marked trial, not silence ---------------------------------------------------
def test_a_cache_hit_gives_the_observer_one_marked_trial_that_is_no_measurement(problem):
    store = MemoryStore("k")
    first, _ = run(problem(), store=store)
    seen = []
    second, reporter = run(problem(on_trial=seen.append), store=store)
    assert second.cache_hit
    assert len(seen) == 1
    marker = seen[0]
    assert marker.cache_hit and marker.ok
    assert marker.config == second.config == {"block": 64}
    assert marker.latency_ms == pytest.approx(second.latency)
    assert marker.index == second.best_trial.index
    # not a measurement: in no result, no report, no stored trial
    assert not any(t.cache_hit for t in second.trials)
    assert reporter.of("trial") == []
    assert not any(t.cache_hit for t in store.known_trials().values())
    assert second.trials == first.trials


def test_measured_trials_are_not_cache_hits(problem):
    seen = []
    run(problem(on_trial=seen.append))
    assert seen and not any(t.cache_hit for t in seen)
