"""The runnable examples of the documentation: each ``docs/snippets/*.py`` runs, and is shown.

Every snippet is run as a script in a fresh interpreter, with the repository root on
``PYTHONPATH`` and a private ``TILEAUTO_CACHE_DIR``, and must exit with status 0. The docs
pages paste the snippets (mkdocs has no include without extra plugins), so each snippet's code
must also appear verbatim in some page: a snippet edited without its page fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SNIPPETS = sorted((DOCS / "snippets").glob("*.py"))


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_there_are_snippets():
    assert SNIPPETS, f"no snippets found under {DOCS / 'snippets'}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=_ids(SNIPPETS))
def test_snippet_is_shown_verbatim_in_a_page(snippet: Path):
    code = snippet.read_text()
    pages = sorted(DOCS.glob("*.md"))
    shown_in = [p.name for p in pages if code in p.read_text()]
    assert shown_in, (
        f"{snippet.relative_to(REPO)} does not appear verbatim in any page of {DOCS.name}/; "
        f"paste the file's exact content into the page that shows it"
    )


@pytest.mark.slow
@pytest.mark.parametrize("snippet", SNIPPETS, ids=_ids(SNIPPETS))
def test_snippet_runs(snippet: Path, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEAUTO_")}
    env["TILEAUTO_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    proc = subprocess.run(
        [sys.executable, str(snippet)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"{snippet.relative_to(REPO)} exited with {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
