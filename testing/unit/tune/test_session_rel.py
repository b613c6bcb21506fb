"""A session's reliability with scripted stages: a config failing when re-timed, a resumed run's
re-timing, the scratch folder of a run that fails at its start, a broken on_trial."""

from __future__ import annotations

import pytest

from tileauto.errors import SettingsError
from tileauto.records import RunOutcome, TrialStatus
from tileauto.report.table import summary_table
from tileauto.testing import RecordingReporter, ScriptedBuilder, ScriptedRunner
from tileauto.tune.session import TuningSession
from tileauto.tune.stores import MemoryStore

SPACE = [{"block": 16}, {"block": 32}, {"block": 64}, {"block": 128}]
LATENCY = {16: 3.0, 32: 2.0, 64: 1.0, 128: 4.0}  # 32 is the default


class FailingRetime(ScriptedRunner):
    """Re-timing fails (the worker died or hung) whenever ``bad`` is among the configs, or
    (``alone_ok``) only when it is timed with others."""

    def __init__(self, script, bad, status, alone_ok=False):
        super().__init__(script)
        self.bad, self.status, self.alone_ok = bad, status, alone_ok
        self.retimed: list[list[int]] = []

    def retime(self, items, rounds):
        blocks = [c["block"] for _, c in items]
        self.retimed.append(blocks)
        if self.bad in blocks and not (self.alone_ok and len(blocks) == 1):
            return RunOutcome(self.status, error=f"scripted {self.status.value}")
        return super().retime(items, rounds)


def run_session(problem, runner, *, builder=None, store=None):
    s = TuningSession(
        problem,
        builder=builder or ScriptedBuilder(),
        runner=runner,
        store=store,
        reporter=RecordingReporter(),
    )
    return s, s.run()


# -- bug 1: a config that crashes or hangs when re-timed ------------------------------------------
@pytest.mark.parametrize("status", [TrialStatus.CRASH, TrialStatus.TIMEOUT])
def test_a_config_failing_when_retimed_takes_the_failure_and_does_not_win(problem, status):
    runner = FailingRetime(lambda c: LATENCY[c["block"]], bad=64, status=status)
    _, result = run_session(problem(), runner)
    trial = {t.config["block"]: t for t in result.trials}[64]
    assert trial.status is status and trial.latency is None
    assert trial.error == f"when re-timed: scripted {status.value}"
    assert any("failed when re-timed" in n for n in trial.notes)
    assert result.config == {"block": 32}  # the best of the others
    # interleaved, then each alone (to find it), then the others interleaved without it
    assert runner.retimed == [[64, 16, 128, 32], [64], [16], [128], [32], [16, 128, 32]]
    assert any("re-timed" in n for n in result.best_trial.notes)


def test_a_retiming_failure_no_config_repeats_alone_is_noted_and_warned(problem):
    runner = FailingRetime(
        lambda c: LATENCY[c["block"]], bad=64, status=TrialStatus.CRASH, alone_ok=True
    )
    with pytest.warns(RuntimeWarning, match="interleaved re-timing failed"):
        _, result = run_session(problem(), runner)
    assert result.config == {"block": 64}  # the first timings stand
    for block in (16, 64, 128, 32):
        trial = {t.config["block"]: t for t in result.trials}[block]
        assert trial.ok and any("interleaved re-timing failed" in n for n in trial.notes)


# -- bug 2: a resumed run re-times the configs an earlier run measured ----------------------------
def _interrupted_first_run(problem, store, first):
    """Measure 32 (the default) and 16, then Ctrl-C at 64."""

    def script(config):
        if config["block"] == 64:
            raise KeyboardInterrupt
        return first[config["block"]]

    with pytest.raises(KeyboardInterrupt):
        run_session(problem(), ScriptedRunner(script), store=store)
    assert sorted(t.config["block"] for t in store.known_trials().values()) == [16, 32]


def test_a_resumed_run_retimes_the_best_configs_measured_before_it(problem):
    true = {16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0}
    store = MemoryStore("k")
    _interrupted_first_run(problem, store, {**true, 16: 5.0})  # 16 hit by a slow spell
    runner = ScriptedRunner(lambda c: true[c["block"]])
    builder = ScriptedBuilder()
    _, result = run_session(problem(), runner, builder=builder, store=store)
    assert result.config == {"block": 16}
    assert result.latency == pytest.approx(1.0)
    assert any("re-timed interleaved" in n for n in result.best_trial.notes)
    assert {"block": 16} in builder.built  # its library, had again to be re-timed


def test_a_contender_whose_kernel_cannot_be_had_is_noted_and_not_ranked(problem):
    true = {16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0}
    store = MemoryStore("k")
    _interrupted_first_run(problem, store, {**true, 16: 0.5})  # a stale, too good timing
    builder = ScriptedBuilder(fails=lambda c: "compile_error" if c["block"] == 16 else None)
    _, result = run_session(
        problem(), ScriptedRunner(lambda c: true[c["block"]]), builder=builder, store=store
    )
    assert result.config == {"block": 32}  # the best of those re-timed
    trial = {t.config["block"]: t for t in result.trials}[16]
    assert trial.ok and any(n.startswith("not re-timed: its kernel") for n in trial.notes)


# -- bug 5: no scratch folder left by a run that fails at its start -------------------------------
@pytest.mark.parametrize("stage", ["builder", "runner"])
def test_a_run_failing_at_its_start_leaves_no_scratch_folder(problem, stage):
    p = problem()

    def broken(*args):
        raise SettingsError("TILEAUTO_AUTO_TUNING_CPU_COUNTS=3: more than the 2 CPUs")

    stages = {"builder": ScriptedBuilder(), "runner": ScriptedRunner(lambda c: 1.0)}
    stages[stage] = broken
    s = TuningSession(p, **stages, load_kernel=lambda a, c: None, reporter=RecordingReporter())
    with pytest.raises(SettingsError):
        s.run()
    staging = p.settings.staging_dir
    assert not staging.exists() or list(staging.iterdir()) == []


# -- bug 6: a failing on_trial is seen ------------------------------------------------------------
def test_a_failing_on_trial_is_warned_once(problem):
    calls = []

    def on_trial(trial):
        calls.append(trial.index)
        if len(calls) == 2:
            raise ValueError("progress bar broke")

    with pytest.warns(RuntimeWarning, match="on_trial raised ValueError: progress bar broke") as w:
        _, result = run_session(problem(on_trial=on_trial), ScriptedRunner(lambda c: 1.0))
    assert len(calls) == 2 and result.config
    assert len([x for x in w if "on_trial" in str(x.message)]) == 1


def test_an_interrupted_run_reports_the_configs_it_measured_once_and_the_rest_untried(problem):
    # the default (block 32, not in this list) was a second row and counted as a config that
    # passed: "3 configs, 3 passed" for a 4-config list of which 2 were measured
    def script(config):
        if config["block"] == 64:
            raise KeyboardInterrupt
        return LATENCY[config["block"]]

    reporter = RecordingReporter()
    session = TuningSession(
        problem([{"block": 16}, {"block": 128}, {"block": 64}, {"block": 8}]),
        builder=ScriptedBuilder(),
        runner=ScriptedRunner(script),
        store=MemoryStore("k"),
        reporter=reporter,
    )
    with pytest.raises(KeyboardInterrupt):
        session.run()
    summary = reporter.events[-1][1]
    assert [t.index for t in summary.trials] == [0, 1]
    assert summary.default is not None and summary.default.config == {"block": 32}
    assert summary.never_tried == 2 and summary.error == "KeyboardInterrupt: "
    table = summary_table("k", summary)
    assert "4 configs, 2 measured (2 never tried), 2 passed" in table
    assert table.count("default") == 2  # the header's column name and the one default row


def test_a_re_timed_trial_keeps_one_re_timing_note(problem):
    # a widened tuning re-times the earlier run's trials: their notes said "re-timed
    # interleaved with the best 3" and "... the best 4" side by side
    store = MemoryStore("k")
    for configs in (SPACE[:3], SPACE):  # the default (32) is re-timed with the best, not one
        _, result = run_session(
            problem(configs), ScriptedRunner(lambda c: LATENCY[c["block"]]), store=store
        )
        store.shelf.results.clear()  # another space: another result's key, the same trials
    notes = [n for n in result.best_trial.notes if n.startswith("re-timed")]
    assert notes == ["re-timed interleaved with the best 3 and the default config"]


# -- a failure at re-timing is what the next tuning finds -----------------------------------------
class EveryRetimeFails(ScriptedRunner):
    """Every config measures, then crashes whenever it is re-timed (a kernel that dies on a
    later call)."""

    def retime(self, items, rounds):
        return RunOutcome(TrialStatus.CRASH, error="scripted crash")


def _disk_store(p):
    from tileauto.jit.target_memo import resolve as resolve_target
    from tileauto.tune import defaults

    return defaults.store_of(p, resolve_target("llvm"))


def test_configs_that_crash_when_retimed_are_stored_so_even_when_none_wins(problem):
    # none passes: the run ends without a result to store, and its crashes were lost with it;
    # the next tuning served a crashing config's first timing as the winner
    from tileauto.errors import NoValidConfigError

    p = problem()
    with pytest.raises(NoValidConfigError):
        run_session(p, EveryRetimeFails(lambda c: LATENCY[c["block"]]), store=_disk_store(p))
    known = _disk_store(p).known_trials()
    retimed = [t for t in known.values() if t.config["block"] != 32]  # the default: not re-timed
    assert retimed and all(t.status is TrialStatus.CRASH for t in retimed), known


def test_a_budget_spent_before_the_first_batch_says_so(problem):
    # the default config (block 32, not in this list) passed; the setup took the 1 ns budget
    from tileauto.errors import NoValidConfigError

    p = problem([{"block": 16}, {"block": 64}, {"block": 128}], max_seconds=1e-9)
    with pytest.raises(NoValidConfigError) as info:
        run_session(p, ScriptedRunner(lambda c: LATENCY[c["block"]]))
    message = str(info.value)
    assert "no config of the 3 was measured" in message
    assert "max_seconds ran out before its first batch" in message
    assert "default config, which passed" in message and "give a larger budget" in message


def test_passes_an_earlier_run_could_not_check_are_measured_again_once_there_is_a_reference(
    problem,
):
    # the first run's default config timed out: its passes were checked against nothing; the
    # second run's default passes, and the config that gives wrong results must not win on
    # its borrowed pass
    from tileauto.records import Validation
    from tileauto.tune.stores import MemoryStore

    store = MemoryStore()
    first = {16: 3.0, 32: "timeout", 64: 1.0, 128: 4.0}  # a slow default, past its timeout
    _, r1 = run_session(problem(), ScriptedRunner(lambda c: first[c["block"]]), store=store)
    assert r1.config == {"block": 64}
    assert {t.config["block"]: t.validation for t in r1.trials}[64] is Validation.SKIPPED
    second = {16: 3.0, 32: 2.0, 64: "mismatch", 128: 4.0}
    runner = ScriptedRunner(lambda c: second[c["block"]])
    store.shelf.results.clear()  # the entry goes (a widened space, say): measurements stay
    _, r2 = run_session(problem(), runner, store=store)
    assert r2.config == {"block": 32}
    assert sorted(c["block"] for c, _ in runner.runs) == [16, 32, 64, 128]  # all checked now
    assert {t.config["block"]: t.status for t in r2.trials}[64] is TrialStatus.MISMATCH
    # a third run with a reference borrows what the second checked: nothing is run again
    third = ScriptedRunner(lambda c: second[c["block"]])
    store.shelf.results.clear()
    _, r3 = run_session(problem(), third, store=store)
    assert r3.config == {"block": 32} and [c["block"] for c, _ in third.runs] == [32]


def test_unchecked_passes_are_not_run_again_when_there_is_still_no_reference(problem):
    from tileauto.tune.stores import MemoryStore

    store = MemoryStore()
    script = {16: 3.0, 32: "crash", 64: 1.0, 128: 4.0}
    run_session(problem(), ScriptedRunner(lambda c: script[c["block"]]), store=store)
    again = ScriptedRunner(lambda c: script[c["block"]])
    store.shelf.results.clear()
    _, result = run_session(problem(), again, store=store)
    # asked for again with the default config, before its run says there is no reference
    # now either: their earlier trials stand (running them would check nothing), the same
    # winner
    assert result.config == {"block": 64}
    assert sorted(c["block"] for c, _ in again.runs) == [32]
    assert {t.config["block"]: t.validation.value for t in result.trials if t.ok} == dict.fromkeys(
        [16, 64, 128], "skipped"
    )


class InterruptedWhileHandling(ScriptedBuilder):
    """Ctrl-C lands while a library handles an exception of its own (psutil's reading of a
    process that just ended, in a CI run)."""

    def build(self, requests, on_result=None):
        try:
            raise FileNotFoundError("/proc/12345/stat")
        except FileNotFoundError:
            raise KeyboardInterrupt()  # noqa: B904 - the implicit context is the point


def test_an_interrupt_during_a_librarys_handling_prints_one_traceback(problem):
    import traceback

    with pytest.raises(KeyboardInterrupt) as info:
        run_session(problem(), ScriptedRunner(lambda c: 1.0), builder=InterruptedWhileHandling())
    printed = "".join(traceback.format_exception(info.value))
    assert printed.count("Traceback (most recent call last)") == 1, printed
    assert "During handling of" not in printed and "FileNotFoundError" not in printed, printed
