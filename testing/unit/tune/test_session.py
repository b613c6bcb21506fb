"""The session loop with scripted stages: no compile, no run worker, no files but its staging."""

from __future__ import annotations

import pytest

from tileauto.errors import NoValidConfigError
from tileauto.records import TrialStatus
from tileauto.search import RandomSearch
from tileauto.testing import RecordingReporter, ScriptedBuilder, ScriptedRunner
from tileauto.tune.session import TuningSession
from tileauto.tune.stages import (
    BuildStage,
    LoadingBuildStage,
    MultiSlotRunStage,
    NotingReporter,
    Reporter,
    RunStage,
    Store,
    TrialStore,
)
from tileauto.tune.stores import MemoryStore

SPACE = [{"block": 16}, {"block": 32}, {"block": 64}, {"block": 128}]


LATENCY = {16: 3.0, 32: 2.0, 64: 1.0, 128: 4.0}


def session(problem, *, fails=None, script=None, store=None, search=None, device="cpu"):
    reporter = RecordingReporter()
    s = TuningSession(
        problem,
        builder=ScriptedBuilder(fails=fails, device_type=device),
        runner=ScriptedRunner(script or (lambda c: LATENCY[c["block"]])),
        store=store,
        search=search,
        reporter=reporter,
    )
    return s, reporter


def test_the_stages_follow_their_protocols():
    assert isinstance(ScriptedBuilder(), BuildStage)
    assert isinstance(ScriptedRunner(lambda c: 1.0), RunStage)
    assert isinstance(MemoryStore(), Store)
    assert isinstance(RecordingReporter(), Reporter)


def test_the_fakes_declare_their_optional_capabilities():
    assert isinstance(ScriptedBuilder(), LoadingBuildStage)  # loads its own winner
    assert isinstance(MemoryStore(), TrialStore)  # keeps each trial as it is measured
    assert isinstance(RecordingReporter(), NotingReporter)  # takes the cache hit's note
    assert not isinstance(ScriptedRunner(lambda c: 1.0), MultiSlotRunStage)


def test_the_fastest_config_that_passes_wins_and_every_trial_is_complete(problem):
    s, reporter = session(problem())
    result = s.run()
    assert result.config == {"block": 64}
    assert result.latency == pytest.approx(1.0)
    assert [t.index for t in result.trials] == [0, 1, 2, 3]
    assert all(t.status is TrialStatus.OK for t in result.trials)
    # every trial was reported as measured, complete (with its index), before the end
    reported = reporter.of("trial")
    assert sorted(t.index for t in reported) == [0, 1, 2, 3]
    assert reporter.events[-1][0] == "finished"
    summary = reporter.of("finished")[0]
    assert summary.best.config == {"block": 64} and summary.error is None


def test_the_start_counts_the_configs_as_the_finish_does(problem):
    # a config given twice counts twice in the trials and the finish line; the start line
    # counted the distinct configs (the log said "start configs = 2 ... finish configs = 4")
    s, reporter = session(problem(configs=SPACE[:2] + SPACE[:2]))
    result = s.run()
    assert reporter.of("started") == [("k", 4)]
    assert len(result.trials) == len(reporter.of("finished")[0].trials) == 4


def test_the_default_config_runs_first_as_the_reference(problem):
    s, _ = session(problem())
    s.run()
    runs = s.runner.runs
    assert runs[0] == ({"block": 32}, True)
    assert [r for _, r in runs[1:]] == [False] * 3


def test_failures_carry_their_status_and_reason_and_never_win(problem):
    fails = lambda c: "compile_error" if c["block"] == 64 else None  # noqa: E731
    script = lambda c: "mismatch" if c["block"] == 16 else LATENCY[c["block"]]  # noqa: E731
    s, _ = session(problem(), fails=fails, script=script)
    result = s.run()
    by_block = {t.config["block"]: t for t in result.trials}
    assert by_block[64].status is TrialStatus.COMPILE_ERROR
    assert by_block[16].status is TrialStatus.MISMATCH
    assert by_block[16].error == "scripted mismatch"
    assert result.config == {"block": 32}


@pytest.mark.parametrize("status", ["compile_timeout", "compile_out_of_memory", "cancelled"])
def test_a_transient_build_failure_is_not_a_permanent_one(problem, status):
    fails = lambda c: status if c["block"] == 16 else None  # noqa: E731
    store = MemoryStore("k")
    s, _ = session(problem(), fails=fails, store=store)
    result = s.run()
    assert result.trials[0].status is TrialStatus(status)
    # the next session of this problem measures that config again, and only that one
    known = store.known_trials()
    assert {t.config["block"] for t in known.values()} == {32, 64, 128}


def test_nothing_passes_raises_with_every_reason(problem):
    s, reporter = session(problem(), script=lambda c: ("crash", "segfault"))
    with pytest.raises(NoValidConfigError) as err:
        s.run()
    assert "none of the 4 configs passed" in str(err.value)
    assert "crash: segfault" in str(err.value)
    assert len(err.value.trials) == 4
    assert reporter.of("finished")[0].error.startswith("autotune k: none")


def test_nothing_passes_after_a_budget_says_how_many_were_measured(problem):
    space = [{"block": b} for b in range(1, 301)]
    s, _ = session(
        problem(space, max_trials=20), script=lambda c: ("crash", "segfault"), search=RandomSearch()
    )
    with pytest.raises(NoValidConfigError) as err:
        s.run()
    first, *groups = str(err.value).splitlines()
    assert first == (
        "autotune k: none of the 20 measured configs passed; the other 280 of the 300 configs"
        " were never tried (search stopped: max_trials was reached):"
    )
    assert groups[0] == "  20 config(s): crash: segfault"
    assert not any("never tried" in line for line in groups)
    assert len(err.value.trials) == 300  # every config still has its trial


def test_a_store_hit_returns_without_building(problem):
    store = MemoryStore("k")
    first, _ = session(problem(), store=store)
    first.run()
    again, reporter = session(problem(), store=store)
    result = again.run()
    assert result.cache_hit and result.config == {"block": 64}
    assert again.builder.built == [] and again.runner.runs == []
    assert reporter.of("note") and "using cached tuning k" in reporter.of("note")[0]


def test_configs_measured_before_are_not_measured_again(problem):
    shelf = MemoryStore.new_shelf()
    first, _ = session(problem(SPACE[:2]), store=MemoryStore("a", shelf))
    first.run()
    # a new space (a new key) sharing the measurements of the old one
    store = MemoryStore("b", shelf)
    store.shelf.trials["b"] = dict(shelf.trials["a"])
    second, _ = session(problem(SPACE), store=store)
    result = second.run()
    built = [c["block"] for c in second.builder.built]
    # the default again (the reference), the new ones, and 16: measured before, one of the
    # best three, its library is loaded (here: built) to be re-timed with the others
    assert built == [32, 64, 128, 16]
    assert result.config == {"block": 64}


def test_a_search_strategy_decides_what_is_measured(problem):
    s, _ = session(problem(), search=RandomSearch(budget=2, seed=1))
    result = s.run()
    measured = {c["block"] for c in s.builder.built}
    assert 32 in measured and len(measured - {32}) in (1, 2)  # the default, and 2 sampled
    never = [t for t in result.trials if t.status is TrialStatus.NOT_RUN]
    assert len(never) == 4 - len(measured)
    assert all(t.error.startswith("never tried: search stopped") for t in never)
    assert s.stop.stop_reason == "done"


class OneByOne:
    """A strategy that asks for one config at a time, in the space's order."""

    def start(self, space, *, parallelism=1, seed=0):
        self.left = list(range(len(space)))

    def ask(self):
        return [self.left.pop(0)] if self.left else []

    def tell(self, index, trial):
        pass

    def describe(self):
        return "one-by-one"


@pytest.mark.parametrize(
    ("budget", "reason"), [({"max_trials": 2}, "max_trials"), ({"plateau": 1}, "plateau")]
)
def test_budgets_stop_the_search_and_say_why(problem, budget, reason):
    # 16 (1 ms) is the best so far, 32 (2 ms) does not improve: a plateau of 1 stops there
    latency = {16: 1.0, 32: 2.0, 64: 3.0, 128: 0.5}
    s, reporter = session(
        problem(**budget), search=OneByOne(), script=lambda c: latency[c["block"]]
    )
    result = s.run()
    assert s.stop.stop_reason == reason
    never = [t for t in result.trials if t.status is TrialStatus.NOT_RUN]
    assert never and all(reason in t.error for t in never)  # never tried, not failed
    assert reason in reporter.of("finished")[0].stop_reason
    assert result.config in [t.config for t in result.trials if t.ok]


def test_max_seconds_counts_the_whole_tuning(problem):
    # a budget shorter than any batch: it runs out after the first one (the default's)
    s, _ = session(problem(max_seconds=1e-9), search=OneByOne())
    result = s.run()
    assert s.stop.stop_reason == "max_seconds"
    assert result.default_trial.ok  # the default is always measured


def test_on_trial_sees_each_trial_and_a_raising_callback_does_not_stop_tuning(problem):
    seen = []
    s, _ = session(problem(on_trial=lambda trial: seen.append(trial.index)))
    assert s.run().config == {"block": 64}
    assert sorted(seen) == [0, 1, 2, 3]

    def on_trial(trial):
        seen.append(trial.index)
        raise RuntimeError("progress bar broke")

    seen.clear()
    s, _ = session(problem(on_trial=on_trial))
    assert s.run().config == {"block": 64}
    assert len(seen) == 1  # switched off after it raised (TileLang's contract)


def test_retiming_decides_between_the_best_few(problem):
    # in the first timing 128 looks best; interleaved re-timing shows 64 is
    first = {16: 3.0, 32: 2.0, 64: 1.2, 128: 1.0}
    again = {16: 3.0, 32: 2.0, 64: 1.0, 128: 1.5}
    s, _ = session(problem(), script=lambda c: first[c["block"]])
    s.runner.retime_script = lambda c: again[c["block"]]
    result = s.run()
    assert result.config == {"block": 64}
    assert any("re-timed" in n for n in result.best_trial.notes)


def test_an_interrupt_cancels_the_build_and_kills_the_runner(problem):
    def script(config):
        if config["block"] == 16:
            raise KeyboardInterrupt
        return 1.0

    s, reporter = session(problem(), script=script)
    with pytest.raises(KeyboardInterrupt):
        s.run()
    assert s.builder.cancelled and s.builder.closed
    assert s.runner.killed
    assert reporter.of("finished")[0].error.startswith("KeyboardInterrupt")


def test_a_gpu_runs_configs_as_they_are_built(problem):
    import threading

    order, ran = [], {b: threading.Event() for b in LATENCY}

    class OneAtATime(ScriptedBuilder):
        """Builds the next config only once the last one ran (or 30 s, a hang guard)."""

        def build(self, requests, on_result):
            for request in requests:
                order.append(("built", request.config["block"]))
                on_result(self._one(request))
                ran[request.config["block"]].wait(30)

    def script(config):
        order.append(("ran", config["block"]))
        ran[config["block"]].set()
        return LATENCY[config["block"]]

    s = TuningSession(
        problem(),
        builder=OneAtATime(device_type="cuda"),
        runner=ScriptedRunner(script, retime_script=lambda c: LATENCY[c["block"]]),
        reporter=RecordingReporter(),
    )
    assert s.run().config == {"block": 64}
    # on a GPU each config runs as soon as it is built (a CPU waits for the whole round)
    assert order == [(e, b) for b in (32, 16, 64, 128) for e in ("built", "ran")]


def test_the_result_draws_its_trials(problem, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    fails = lambda c: "compile_error" if c["block"] == 128 else None  # noqa: E731
    s, _ = session(problem(), fails=fails)
    out = s.run().plot(tmp_path / "trials.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_trial_log_streams_every_trial_and_reads_back(problem):
    from tileauto.report.console import default_reporter
    from tileauto.report.log import read_trial_log

    p = problem()
    reporter = default_reporter(p.settings.logs_dir, p.name, verbose=False)
    s = TuningSession(
        p,
        builder=ScriptedBuilder(),
        runner=ScriptedRunner(lambda c: LATENCY[c["block"]]),
        reporter=reporter,
    )
    result = s.run()
    trials, finish = read_trial_log(result.log_path)
    assert [t.index for t in trials] == [0, 1, 2, 3]
    assert finish is not None and finish["best"]["config"] == {"block": 64}


def test_on_a_gpu_the_configs_built_while_others_ran_are_timed_together(problem):
    """A runner with several device slots (``run_many``: one Ray actor per GPU) gets every
    config that was built while the last ones ran, not one config at a time."""
    import threading

    started, all_built = threading.Event(), threading.Event()

    class ThreeAtOnce(ScriptedBuilder):
        """The default, then the other three once the default's run has started."""

        def build(self, requests, on_result):
            first = next(r for r in requests if r.config == {"block": 32})
            on_result(self._one(first))
            started.wait(30)  # a hang guard: the default's run starts at once
            for request in requests:
                if request is not first:
                    on_result(self._one(request))
            all_built.set()

    def script(config):
        if config == {"block": 32}:
            started.set()
            all_built.wait(30)  # the default's run ends once the others are built
        return LATENCY[config["block"]]

    batches = []

    class Slots(ScriptedRunner):
        def run_many(self, items):
            batches.append([config["block"] for _, config in items])
            for k, (artifact, config) in enumerate(items):
                yield k, self.run(artifact, config, is_reference=False)

    runner = Slots(script, retime_script=lambda c: LATENCY[c["block"]])
    s = TuningSession(
        problem(),
        builder=ThreeAtOnce(device_type="cuda"),
        runner=runner,
        reporter=RecordingReporter(),
    )
    result = s.run()
    assert result.config == {"block": 64}
    assert batches == [[16, 64, 128]]  # in the space's order, all three at once
    assert [t.index for t in result.trials] == [0, 1, 2, 3]


def test_an_interrupted_run_keeps_each_trial_it_measured_and_the_rerun_measures_the_rest(problem):
    store = MemoryStore("k")

    def script(config):
        if config["block"] == 64:  # runs go 32 (the default), 16, then 64: Ctrl-C there
            raise KeyboardInterrupt
        return LATENCY[config["block"]]

    s, _ = session(problem(), script=script, store=store)
    with pytest.raises(KeyboardInterrupt):
        s.run()
    assert store.saves == 0  # the result never was; each trial was stored as it was measured
    assert sorted(t.config["block"] for t in store.known_trials().values()) == [16, 32]
    again, _ = session(problem(), store=store)
    result = again.run()
    # 32: the reference; 16, measured before and one of the best three, to be re-timed
    assert sorted(c["block"] for c in again.builder.built) == [16, 32, 64, 128]
    assert [c["block"] for c, timed in again.runner.runs if timed is False] == [64, 128]
    assert result.config == {"block": 64}


def test_a_store_keeps_a_measurement_over_a_transient_failure_and_an_untried_config(problem):
    shelf = MemoryStore.new_shelf()
    session(problem(), store=MemoryStore("k", shelf))[0].run()
    store = MemoryStore("k", shelf)
    store.load, store.known_trials = lambda: None, dict  # as if it started before that saved
    budgeted, _ = session(problem(max_trials=1), store=store)
    result = budgeted.run()
    assert sum(t.status is TrialStatus.NOT_RUN for t in result.trials) == 3
    kept = MemoryStore("k", shelf).known_trials()
    assert {t.config["block"]: t.status for t in kept.values()} == dict.fromkeys(
        LATENCY, TrialStatus.OK
    )


def test_a_session_without_its_stages_says_which_and_where_the_defaults_are(problem):
    with pytest.raises(TypeError, match=r"builder and runner not given.*defaults\.session"):
        TuningSession(problem)
    with pytest.raises(TypeError, match=r"runner not given"):
        TuningSession(problem, builder=ScriptedBuilder())
