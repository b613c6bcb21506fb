"""Tests of tileauto.report.log: the streamed trial log and its reader."""

from __future__ import annotations

import json
import logging
import stat

import pytest
from report_fakes import failed_trial, log_lines, ok_trial, summary_of

from tileauto.records import Trial, TrialStatus
from tileauto.report.log import TrialLog, read_trial_log


def test_trial_log_streams_each_trial_before_finished(tmp_path):
    logs = tmp_path / "logs"
    trials = (ok_trial(0, 2.0), failed_trial(1), ok_trial(2, 1.0))
    reporter = TrialLog(logs, "gemm")
    reporter.started("gemm", 3)
    [path] = logs.iterdir()
    assert path.name.startswith("autotune-gemm-") and path.suffix == ".jsonl"
    assert [r["event"] for r in log_lines(path)] == ["start"]
    for k, trial in enumerate(trials):
        reporter.trial(trial)
        lines = log_lines(path)  # read back while the run goes on: the line is already there
        assert len(lines) == 2 + k
        assert Trial.from_json(lines[-1]) == trial
    assert reporter.finished(summary_of(trials)) == path
    start, *middle, finish = log_lines(path)
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
    trials = (ok_trial(0, 2.0), failed_trial(1, TrialStatus.NOT_RUN), ok_trial(2, 1.0))
    reporter = TrialLog(tmp_path, "gemm")
    reporter.started("gemm", 3)
    reporter.trial(trials[0])
    path = reporter.finished(summary_of(trials))
    assert path is not None
    assert [r.get("index") for r in log_lines(path)] == [None, 0, 1, 2, None]
    assert read_trial_log(path)[0] == trials


def test_read_trial_log_of_a_killed_run_skips_the_cut_line(tmp_path):
    reporter = TrialLog(tmp_path, "gemm")
    reporter.started("gemm", 3)
    reporter.trial(ok_trial(0, 2.0))
    reporter.trial(failed_trial(1))
    path = reporter.path
    assert path is not None
    with path.open("a") as f:  # the process died while writing its third trial
        f.write(json.dumps({"event": "trial", **ok_trial(2, 1.0).to_json()})[:25])
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
    path = reporter.finished(summary_of((ok_trial(0, 1.0),)))
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
        reporter.trial(ok_trial(0, 1.0))
        assert reporter.finished(summary_of((ok_trial(0, 1.0),))) is None
    assert len(caplog.records) == 1
    assert "disabled" in caplog.records[0].getMessage()


def test_trial_log_write_error_mid_run_disables_it(tmp_path, caplog):
    reporter = TrialLog(tmp_path, "gemm")
    reporter.started("gemm", 2)
    reporter.trial(ok_trial(0, 1.0))

    def full_disk(_text: str) -> int:
        raise OSError(28, "No space left on device")

    assert reporter._file is not None
    reporter._file.write = full_disk  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="tileauto.report"):
        reporter.trial(ok_trial(1, 2.0))
        reporter.trial(ok_trial(2, 3.0))
        assert reporter.finished(summary_of((ok_trial(0, 1.0), ok_trial(1, 2.0)))) is None
    assert len(caplog.records) == 1
    assert reporter.path is not None
    assert [t.index for t in read_trial_log(reporter.path)[0]] == [0]
