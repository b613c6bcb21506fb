"""Tests of tileauto.report.table: the trial table and the failure summary."""

from __future__ import annotations

from report_fakes import failed_trial, ok_trial, summary_of

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.report.table import failure_summary, format_table, summary_table


def test_format_table_and_failure_summary_keep_their_shape():
    default = Trial(-1, {}, TrialStatus.OK, LatencyStats.from_samples_ns([4e6]))
    table = format_table([ok_trial(0, 2.0), failed_trial(1)], 0, default, title="t")
    lines = table.splitlines()
    assert lines[0] == "t"
    assert lines[3].split()[:3] == ["default", "(nothing", "tuned)"]
    assert lines[4].split()[:3] == ["*", "0", "block=8"] and "2.00x" in lines[4]
    assert failure_summary([ok_trial(0, 1.0), failed_trial(1)]) == (
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
    mixed = [failed(i, "a" if i % 3 else "b") for i in range(12)] + [ok_trial(12, 1.0)]
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


def test_a_long_or_multi_line_config_keeps_one_row_of_bounded_width():
    """A 150-character config value made 300-character lines (the status was cut at 70, the
    config never), and a newline in a value broke its row in two."""
    latency = LatencyStats.from_samples_ns([1e6])
    trials = [
        Trial(0, {"tag": "x" * 150}, TrialStatus.OK, latency),
        Trial(1, {"tag": "a\nb\tc"}, TrialStatus.OK, latency),
        Trial(2, {"tag": "y"}, TrialStatus.COMPILE_ERROR, error="z" * 200),
    ]
    lines = format_table(trials, 0, None).splitlines()
    assert len(lines) == 2 + len(trials)
    assert max(len(line) for line in lines) < 200
    assert "tag=a\\nb\\tc" in lines[3]
    assert "tag=" + "x" * 63 + "..." in lines[2] and "x" * 64 not in lines[2]


def test_a_stopped_search_says_stopped_once_in_the_title():
    reason = "search stopped: max_trials was reached; 2 measured, 22 never tried"
    summary = summary_of((ok_trial(0, 1.0), ok_trial(1, 2.0)), stop_reason=reason)
    title = summary_table("gemm", summary).splitlines()[0]
    assert title.endswith("(stopped: max_trials was reached; 2 measured, 22 never tried)")
    assert "search stopped" not in title
