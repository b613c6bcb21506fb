"""The report tables the docs show are real ones: ``n`` (timed runs) follows ``rep``.

``rep`` is milliseconds, so a config is timed about ``rep / latency`` times (at least 3): the
examples of ``rep=5`` tunings cannot show ``n`` = 5 for every config, as the old count meaning
did. Rows under 0.01 ms, whose per-call estimate is mostly the call's overhead, are only
checked to be timed many times.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
REP_MS = 5.0  # what the tunings of these examples ask for (rep=5)
_ROW = re.compile(r"^[* ] +(?:default|\d+) .*? ok +(\S+) +\S+ +(\d+) ", re.MULTILINE)


def _ok_rows(page: str) -> list[tuple[float, int]]:
    """(median ms, n) of every passing row of every report table on ``page``."""
    tables = re.findall(r"```text\n(autotune \w+: \d+ configs.*?)```", page, re.DOTALL)
    return [(float(ms), int(n)) for table in tables for ms, n in _ROW.findall(table)]


@pytest.mark.parametrize("page", ["quickstart.md", "tuning.md"])
def test_the_timed_runs_of_an_example_table_fit_rep_milliseconds(page):
    rows = _ok_rows((DOCS / page).read_text())
    assert rows, f"no report table with passing rows found in docs/{page}"
    for median_ms, n in rows:
        if median_ms < 0.01:  # the call's overhead dominates its estimate: many runs, at least
            assert n >= 100, f"docs/{page}: a row of {median_ms} ms shows n={n}"
            continue
        expected = max(3.0, REP_MS / median_ms)
        assert expected / 3 <= n <= expected * 3, (
            f"docs/{page}: a row of {median_ms} ms shows n={n}; rep={REP_MS:g} ms times it "
            f"about {expected:.0f} times"
        )
