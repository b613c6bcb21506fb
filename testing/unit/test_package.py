"""tileauto/__init__.py: the lazy package reaches every subpackage the docs write as ``tileauto.X.Y``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tileauto

# what the docs write after a plain ``import tileauto`` (README, docs/tuning.md, docs/testing.md)
DOCS_NAMES = [
    "tileauto.space.product",
    "tileauto.space.Space",
    "tileauto.search.GuidedSearch",
    "tileauto.search.run_search",
    "tileauto.testing.ScriptedRunner",
    "tileauto.records.TRANSIENT",
    "tileauto.report.plot.plot_trials",
    "tileauto.report.log.read_trial_log",
    "tileauto.result.record.AutotuneResult",
    "tileauto.language",
]


def test_a_plain_import_reaches_the_subpackages_the_docs_name():
    # a fresh interpreter: in this one, other tests have already imported the subpackages
    code = "import tileauto\n" + "".join(f"{name}\n" for name in DOCS_NAMES)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_importing_tileauto_imports_no_subpackage():
    code = (
        "import sys, tileauto\nprint(sorted(m for m in sys.modules if m.startswith('tileauto.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        tileauto.nonesuch  # noqa: B018
    assert not hasattr(tileauto, "_native_private_name")
