"""Tests of tileauto.report.reporter: the streamed trial log, the console reporter and the fan-out."""

from __future__ import annotations

import json
import logging
import stat
import threading
from pathlib import Path

import pytest

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.report.reporter import (
    ConsoleReporter,
    Reporters,
    TrialLog,
    default_reporter,
    failure_summary,
    format_table,
    read_trial_log,
)
from tileauto.tune.stages import Reporter


def _ok(index: int, ms: float) -> Trial:
    latency = LatencyStats.from_samples_ns([ms * 1e6, ms * 1.1e6, ms * 0.9e6])
    return Trial(index, {"block": 8 * (index + 1)}, TrialStatus.OK, latency, compile_s=0.5)


def _failed(index: int, status: TrialStatus = TrialStatus.COMPILE_ERROR) -> Trial:
    return Trial(index, {"block": 8 * (index + 1)}, status, error=f"{status.value} here\ndetail")


def _summary(trials: tuple[Trial, ...], **extra) -> dict:
    ok = [t for t in trials if t.ok]
    best = min(ok, key=lambda t: t.latency_ms or 0.0) if ok else None
    return {
        "name": "gemm",
        "trials": trials,
        "best": best,
        "default": trials[0],
        "ref_latency_ms": 2.5,
        "elapsed_s": 1.25,
        "stop_reason": None,
        "key": "abc123",
        "error": None if best else "no config passed",
        **extra,
    }


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trial_log_streams_each_trial_before_finished(tmp_path):
    logs = tmp_path / "logs"
    trials = (_ok(0, 2.0), _failed(1), _ok(2, 1.0))
    reporter = TrialLog(logs, "gemm")
    reporter.started("gemm", 3)
    [path] = logs.iterdir()
    assert path.name.startswith("autotune-gemm-") and path.suffix == ".jsonl"
    assert [r["event"] for r in _lines(path)] == ["start"]
    for k, trial in enumerate(trials):
        reporter.trial(trial)
        lines = _lines(path)  # read back while the run goes on: the line is already there
        assert len(lines) == 2 + k
        assert Trial.from_json(lines[-1]) == trial
    assert reporter.finished(_summary(trials)) == path
    start, *middle, finish = _lines(path)
    assert start == {**start, "event": "start", "name": "gemm", "configs": 3, "format": 1}
    assert len(middle) == 3  # every trial was streamed: nothing written again at the end
    assert finish["event"] == "finish"
    assert finish["best"]["index"] == 2 and finish["default"]["index"] == 0
    assert finish["ref_latency_ms"] == 2.5 and finish["elapsed_s"] == 1.25
    assert finish["key"] == "abc123" and finish["error"] is None
    assert finish["table"].startswith("autotune gemm: 3 configs, 2 passed")
    got, read_finish = read_trial_log(path)
    assert got == trials
    assert read_finish is not None and read_finish["passed"] == 2


def test_trial_log_writes_trials_it_was_not_told_at_the_end(tmp_path):
    # configs reused from the cache or not run are never measured: the log still has them all
    trials = (_ok(0, 2.0), _failed(1, TrialStatus.NOT_RUN), _ok(2, 1.0))
    reporter = TrialLog(tmp_path, "gemm")
    reporter.started("gemm", 3)
    reporter.trial(trials[0])
    path = reporter.finished(_summary(trials))
    assert path is not None
    assert [r.get("index") for r in _lines(path)] == [None, 0, 1, 2, None]
    assert read_trial_log(path)[0] == trials


def test_read_trial_log_of_a_killed_run_skips_the_cut_line(tmp_path):
    reporter = TrialLog(tmp_path, "gemm")
    reporter.started("gemm", 3)
    reporter.trial(_ok(0, 2.0))
    reporter.trial(_failed(1))
    path = reporter.path
    assert path is not None
    with path.open("a") as f:  # the process died while writing its third trial
        f.write(json.dumps({"event": "trial", **_ok(2, 1.0).to_json()})[:25])
    trials, finish = read_trial_log(path)
    assert [t.index for t in trials] == [0, 1]
    assert finish is None


def test_read_trial_log_rejects_damage_and_other_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event": "start"}\n{"event": "tri\n{"event": "finish"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_trial_log(bad)
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="not a tileauto trial log"):
        read_trial_log(other)


def test_trial_log_is_private(tmp_path):
    logs = tmp_path / "new" / "logs"
    reporter = TrialLog(logs, "gemm")
    reporter.started("gemm", 1)
    path = reporter.finished(_summary((_ok(0, 1.0),)))
    assert path is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700


def test_trial_logs_of_one_second_do_not_collide(tmp_path):
    first, second = TrialLog(tmp_path, "gemm"), TrialLog(tmp_path, "gemm")
    first.started("gemm", 1)
    second.started("gemm", 1)
    assert first.path is not None and second.path is not None
    assert first.path != second.path


def test_trial_log_name_is_made_safe_for_a_file_name(tmp_path):
    reporter = TrialLog(tmp_path, "../<lambda> kernel")
    reporter.started("../<lambda> kernel", 1)
    assert reporter.path is not None and reporter.path.parent == tmp_path
    assert reporter.path.name.startswith("autotune-lambda_kernel-")


def test_trial_log_that_cannot_be_written_warns_once_and_never_raises(tmp_path, caplog):
    blocker = tmp_path / "logs"
    blocker.write_text("a file where the logs folder should be")
    reporter = TrialLog(blocker, "gemm")
    with caplog.at_level(logging.WARNING, logger="tileauto.report"):
        reporter.started("gemm", 2)
        reporter.trial(_ok(0, 1.0))
        assert reporter.finished(_summary((_ok(0, 1.0),))) is None
    assert len(caplog.records) == 1
    assert "disabled" in caplog.records[0].getMessage()


def test_trial_log_write_error_mid_run_disables_it(tmp_path, caplog):
    reporter = TrialLog(tmp_path, "gemm")
    reporter.started("gemm", 2)
    reporter.trial(_ok(0, 1.0))

    def full_disk(_text: str) -> int:
        raise OSError(28, "No space left on device")

    assert reporter._file is not None
    reporter._file.write = full_disk  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="tileauto.report"):
        reporter.trial(_ok(1, 2.0))
        reporter.trial(_ok(2, 3.0))
        assert reporter.finished(_summary((_ok(0, 1.0), _ok(1, 2.0)))) is None
    assert len(caplog.records) == 1
    assert reporter.path is not None
    assert [t.index for t in read_trial_log(reporter.path)[0]] == [0]


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

    def finished(self, summary: dict) -> Path | None:
        self.calls.append(f"finished:{summary.get('log_path')}")
        return None


class _Broken(_Recorder):
    def __getattribute__(self, name: str):
        if name in {"started", "steps", "step", "trial", "finished"}:
            raise RuntimeError(f"broken {name}")
        return super().__getattribute__(name)


class _Logged(_Recorder):
    def finished(self, summary: dict) -> Path | None:
        super().finished(summary)
        return Path("/logs/x.jsonl")


def test_reporters_go_on_past_one_that_raises(caplog):
    after = _Recorder()
    reporters = Reporters(_Broken(), after)
    with caplog.at_level(logging.WARNING, logger="tileauto.report"):
        reporters.started("gemm", 2)
        reporters.steps(4)
        reporters.step()
        reporters.trial(_ok(0, 1.0))
        assert reporters.finished(_summary((_ok(0, 1.0),))) is None
    assert after.calls == ["started", "steps", "step", "trial", "finished:None"]
    assert len(caplog.records) == 1  # one warning per broken reporter, not one per call
    assert "broken started" in caplog.records[0].getMessage()


def test_reporters_hand_the_log_path_to_the_next_ones():
    after = _Recorder()
    reporters = Reporters(_Recorder(), _Logged(), after)
    assert reporters.finished(_summary((_ok(0, 1.0),))) == Path("/logs/x.jsonl")
    assert after.calls == ["finished:/logs/x.jsonl"]


def test_reporters_are_reporters(tmp_path):
    for reporter in (
        Reporters(),
        TrialLog(tmp_path, "gemm"),
        ConsoleReporter("gemm", False),
        default_reporter(tmp_path, "gemm", False),
    ):
        assert isinstance(reporter, Reporter)


def _run_console(reporter: ConsoleReporter, summary: dict) -> None:
    reporter.started("gemm", len(summary["trials"]))
    reporter.steps(2 * len(summary["trials"]))
    for trial in summary["trials"]:
        reporter.step()
        reporter.step()
        reporter.trial(trial)
    reporter.finished({**summary, "log_path": Path("/logs/x.jsonl")})


def test_console_prints_the_table_to_stdout_when_verbose(capsys):
    trials = (_ok(0, 2.0), _failed(1), _ok(2, 1.0))
    _run_console(ConsoleReporter("gemm", verbose=True), _summary(trials))
    out = capsys.readouterr().out
    assert out.startswith("autotune gemm: 3 configs, 2 passed, 1.2 s\n")
    assert "*  2" in out and "compile_error: compile_error here" in out
    assert out.endswith("log: /logs/x.jsonl\n")


def test_console_is_quiet_unless_verbose_and_logs_events(capsys, caplog):
    trials = (_ok(0, 2.0), _failed(1))
    with caplog.at_level(logging.DEBUG, logger="tileauto.report"):
        _run_console(ConsoleReporter("gemm", verbose=False), _summary(trials))
    assert capsys.readouterr() == ("", "")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "autotune gemm: tuning 2 configs"
    assert any("[1] block=16: compile_error" in m for m in messages)
    assert "best [0] block=8 at 2 ms" in messages[-1]


def test_console_prints_nothing_when_no_config_passed(capsys):
    # the session raises NoValidConfigError, which carries the failures and the log's path
    _run_console(ConsoleReporter("gemm", verbose=True), _summary((_failed(0), _failed(1))))
    assert capsys.readouterr().out == ""


def test_console_bar_starts_no_monitor_thread():
    # a live tqdm monitor thread would stop the next tuning from forking its workers
    reporter = ConsoleReporter("gemm", verbose=True)
    reporter.started("gemm", 2)
    assert reporter._bar is not None and reporter._bar.monitor_interval == 0
    assert not [t for t in threading.enumerate() if "TMonitor" in type(t).__name__]
    reporter.finished(_summary((_failed(0),)))


def test_default_reporter_logs_then_prints(tmp_path, capsys):
    reporter = default_reporter(tmp_path, "gemm", True)
    trials = (_ok(0, 2.0), _ok(1, 1.0))
    reporter.started("gemm", 2)
    for trial in trials:
        reporter.trial(trial)
    path = reporter.finished(_summary(trials))
    assert path is not None and path.parent == tmp_path
    assert capsys.readouterr().out.endswith(f"log: {path}\n")
    assert read_trial_log(path)[0] == trials


def test_format_table_and_failure_summary_keep_their_shape():
    default = Trial(-1, {}, TrialStatus.OK, LatencyStats.from_samples_ns([4e6]))
    table = format_table([_ok(0, 2.0), _failed(1)], 0, default, title="t")
    lines = table.splitlines()
    assert lines[0] == "t"
    assert lines[3].split()[:2] == ["default", "(defaults)"]
    assert lines[4].split()[:3] == ["*", "0", "block=8"] and "2.00x" in lines[4]
    assert failure_summary([_ok(0, 1.0), _failed(1)]) == (
        "  [1] block=16: compile_error: compile_error here"
    )


def test_many_failures_are_grouped_by_reason_most_frequent_first():
    def failed(i: int, why: str) -> Trial:
        return Trial(i, {"block": i}, TrialStatus.COMPILE_ERROR, error=why)

    same = [failed(i, "No module named 'k'") for i in range(2000)]
    assert failure_summary(same).splitlines() == [
        "  2000 config(s): compile_error: No module named 'k'",
        "    [0] block=0, [1] block=1, [2] block=2 and 1997 more",
    ]
    mixed = [failed(i, "a" if i % 3 else "b") for i in range(12)] + [_ok(12, 1.0)]
    assert failure_summary(mixed).splitlines() == [
        "  8 config(s): compile_error: a",
        "    [1] block=1, [2] block=2, [4] block=4 and 5 more",
        "  4 config(s): compile_error: b",
        "    [0] block=0, [3] block=3, [6] block=6 and 1 more",
    ]
    # every config its own reason: the first reasons, then how many are left
    distinct = failure_summary([failed(i, f"error {i}") for i in range(20)]).splitlines()
    assert len(distinct) == 8 * 2 + 1
    assert distinct[-1] == "  12 more config(s), for 12 other reasons"


def test_never_tried_configs_are_not_a_failure_group():
    # a budget stopped the search: the untried configs are not failures, the measured ones are
    why = "never tried: search stopped: max_trials was reached; 20 measured, 280 never tried"
    untried = [Trial(i, {"block": i}, TrialStatus.NOT_RUN, error=why) for i in range(280)]
    crashed = [Trial(280 + i, {"block": 280 + i}, TrialStatus.CRASH, error="x") for i in range(20)]
    assert failure_summary(untried + crashed).splitlines() == [
        "  20 config(s): crash: x",
        "    [280] block=280, [281] block=281, [282] block=282 and 17 more",
    ]
    assert failure_summary(untried[:3] + crashed[:2]).splitlines() == [
        "  [280] block=280: crash: x",
        "  [281] block=281: crash: x",
    ]


def test_an_interrupted_session_is_logged_with_its_error(tmp_path, caplog):
    # the session reports the end of a Ctrl-C'd run too: what was measured, and why it ended
    reporter = default_reporter(tmp_path, "gemm", False)
    reporter.started("gemm", 3)
    reporter.trial(_ok(0, 2.0))
    summary = {**_summary((_ok(0, 2.0),)), "best": None, "error": "KeyboardInterrupt: "}
    with caplog.at_level(logging.INFO, logger="tileauto.report"):
        path = reporter.finished(summary)
    assert path is not None
    trials, finish = read_trial_log(path)
    assert [t.index for t in trials] == [0]
    assert finish is not None and finish["error"] == "KeyboardInterrupt: "
    assert finish["best"] is None and "1 configs, 1 passed, 1.2 s, no winner" in finish["table"]
    assert "no winner: KeyboardInterrupt:" in caplog.records[-1].getMessage()
