"""Tests of tileauto.report.console: the console reporter, the fan-out, the default reporter."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path

from report_fakes import failed_trial, ok_trial, summary_of

from tileauto.records import SessionSummary, Trial
from tileauto.report.console import ConsoleReporter, Reporter, Reporters, default_reporter
from tileauto.report.log import TrialLog, read_trial_log


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def started(self, name: str, configs: int) -> None:
        self.calls.append("started")

    def steps(self, total: int) -> None:
        self.calls.append("steps")

    def step(self) -> None:
        self.calls.append("step")

    def trial(self, trial: Trial) -> None:
        self.calls.append("trial")

    def finished(self, summary: SessionSummary) -> Path | None:
        self.calls.append(f"finished:{summary.log_path}")
        return None


class _Broken(_Recorder):
    def __getattribute__(self, name: str):
        if name in {"started", "steps", "step", "trial", "finished"}:
            raise RuntimeError(f"broken {name}")
        return super().__getattribute__(name)


class _Logged(_Recorder):
    def finished(self, summary: SessionSummary) -> Path | None:
        super().finished(summary)
        return Path("/logs/x.jsonl")


def test_reporters_go_on_past_one_that_raises(caplog):
    after = _Recorder()
    reporters = Reporters(_Broken(), after)
    with caplog.at_level(logging.WARNING, logger="tileauto.report"):
        reporters.started("gemm", 2)
        reporters.steps(4)
        reporters.step()
        reporters.trial(ok_trial(0, 1.0))
        assert reporters.finished(summary_of((ok_trial(0, 1.0),))) is None
    assert after.calls == ["started", "steps", "step", "trial", "finished:None"]
    assert len(caplog.records) == 1  # one warning per broken reporter, not one per call
    assert "broken started" in caplog.records[0].getMessage()


def test_reporters_hand_the_log_path_to_the_next_ones():
    after = _Recorder()
    reporters = Reporters(_Recorder(), _Logged(), after)
    assert reporters.finished(summary_of((ok_trial(0, 1.0),))) == Path("/logs/x.jsonl")
    assert after.calls == ["finished:/logs/x.jsonl"]


def test_reporters_are_reporters(tmp_path):
    for reporter in (
        Reporters(),
        TrialLog(tmp_path, "gemm"),
        ConsoleReporter("gemm", False),
        default_reporter(tmp_path, "gemm", False),
    ):
        assert isinstance(reporter, Reporter)


def _run_console(reporter: ConsoleReporter, summary: SessionSummary) -> None:
    reporter.started("gemm", len(summary.trials))
    reporter.steps(2 * len(summary.trials))
    for trial in summary.trials:
        reporter.step()
        reporter.step()
        reporter.trial(trial)
    reporter.finished(replace(summary, log_path=Path("/logs/x.jsonl")))


def test_console_prints_the_table_to_stdout_when_verbose(capsys):
    trials = (ok_trial(0, 2.0), failed_trial(1), ok_trial(2, 1.0))
    _run_console(ConsoleReporter("gemm", verbose=True), summary_of(trials))
    out = capsys.readouterr().out
    assert out.startswith("autotune gemm: 3 configs, 2 passed, 1.2 s\n")
    assert "*  2" in out and "compile_error: compile_error here" in out
    assert out.endswith("log: /logs/x.jsonl\n")


def test_console_is_quiet_unless_verbose_and_logs_events(capsys, caplog):
    trials = (ok_trial(0, 2.0), failed_trial(1))
    with caplog.at_level(logging.DEBUG, logger="tileauto.report"):
        _run_console(ConsoleReporter("gemm", verbose=False), summary_of(trials))
    assert capsys.readouterr() == ("", "")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "autotune gemm: tuning 2 configs"
    assert any("[1] block=16: compile_error" in m for m in messages)
    assert "best [0] block=8 at 2 ms" in messages[-1]


def test_console_prints_nothing_when_no_config_passed(capsys):
    # the session raises NoValidConfigError, which carries the failures and the log's path
    _run_console(
        ConsoleReporter("gemm", verbose=True), summary_of((failed_trial(0), failed_trial(1)))
    )
    assert capsys.readouterr().out == ""


def test_console_bar_starts_no_monitor_thread():
    # a live tqdm monitor thread would stop the next tuning from forking its workers
    import tqdm

    running = tqdm.tqdm.monitor  # another library's bar (Inductor's, after a torch.compile)
    if running is not None:
        running.exit()  # one is a singleton: stopped, so that ours would show
    reporter = ConsoleReporter("gemm", verbose=True)
    reporter.started("gemm", 2)
    assert reporter._bar is not None and reporter._bar.monitor_interval == 0
    assert not [t for t in threading.enumerate() if "TMonitor" in type(t).__name__]
    reporter.finished(summary_of((failed_trial(0),)))


def test_default_reporter_logs_then_prints(tmp_path, capsys):
    reporter = default_reporter(tmp_path, "gemm", True)
    trials = (ok_trial(0, 2.0), ok_trial(1, 1.0))
    reporter.started("gemm", 2)
    for trial in trials:
        reporter.trial(trial)
    path = reporter.finished(summary_of(trials))
    assert path is not None and path.parent == tmp_path
    assert capsys.readouterr().out.endswith(f"log: {path}\n")
    assert read_trial_log(path)[0] == trials


def test_an_interrupted_session_is_logged_with_its_error(tmp_path, caplog):
    # the session reports the end of a Ctrl-C'd run too: what was measured, and why it ended
    reporter = default_reporter(tmp_path, "gemm", False)
    reporter.started("gemm", 3)
    reporter.trial(ok_trial(0, 2.0))
    summary = replace(summary_of((ok_trial(0, 2.0),)), best=None, error="KeyboardInterrupt: ")
    with caplog.at_level(logging.INFO, logger="tileauto.report"):
        path = reporter.finished(summary)
    assert path is not None
    trials, finish = read_trial_log(path)
    assert [t.index for t in trials] == [0]
    assert finish is not None and finish["error"] == "KeyboardInterrupt: "
    assert finish["best"] is None and "1 configs, 1 passed, 1.2 s, no winner" in finish["table"]
    assert "no winner: KeyboardInterrupt:" in caplog.records[-1].getMessage()


def test_console_bar_shows_a_sub_microsecond_best_with_significant_digits():
    reporter = ConsoleReporter("gemm", verbose=True)
    reporter.started("gemm", 2)
    reporter.trial(ok_trial(0, 3.1e-05))
    assert reporter._bar is not None
    assert "best 3.1e-05 ms" in reporter._bar.postfix  # not "best 0.0000 ms"
    reporter.finished(summary_of((ok_trial(0, 3.1e-05),)))
