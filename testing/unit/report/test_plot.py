"""Tests of tileauto.report.plot: pictures of a space's trials, and the message without matplotlib."""

from __future__ import annotations

import sys

import pytest

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.report.plot import plot_trials

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _ok(index: int, ms: float) -> Trial:
    latency = LatencyStats.from_samples_ns([ms * 1e6, ms * 1.2e6, ms * 0.9e6, ms * 1.05e6])
    return Trial(index, {"block": index}, TrialStatus.OK, latency)


def _failed(index: int, status: TrialStatus) -> Trial:
    return Trial(index, {"block": index}, status, error=status.value)


def _image(path):
    image = pytest.importorskip("matplotlib.image")
    assert path.read_bytes()[:8] == PNG_MAGIC
    return image.imread(path)


def test_plot_of_every_status_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    failures = [s for s in TrialStatus if not s.ok]
    trials = [_ok(0, 1.0), *(_failed(i + 1, s) for i, s in enumerate(failures)), _ok(99, 300.0)]
    path = plot_trials(trials, tmp_path / "trials.png", best_index=0, default=trials[0])
    assert path == tmp_path / "trials.png"
    height, width, _ = _image(path).shape
    assert width >= 600 and height >= 400


def test_plot_when_every_config_failed(tmp_path):
    pytest.importorskip("matplotlib")
    trials = [_failed(0, TrialStatus.COMPILE_ERROR), _failed(1, TrialStatus.TIMEOUT)]
    path = plot_trials(trials, tmp_path / "failed.png", default=trials[0], title="nothing")
    assert _image(path).shape[0] > 0


def test_plot_of_one_config(tmp_path):
    pytest.importorskip("matplotlib")
    trial = _ok(0, 0.004)
    assert _image(plot_trials([trial], tmp_path / "one.png", best_index=0, default=trial)).size


def test_plot_with_a_default_outside_the_space_and_no_trials(tmp_path):
    pytest.importorskip("matplotlib")
    default = Trial(-1, {}, TrialStatus.OK, LatencyStats.from_samples_ns([2e6]))
    assert _image(
        plot_trials([_ok(0, 1.0)], tmp_path / "d.png", best_index=0, default=default)
    ).size
    assert _image(plot_trials([], tmp_path / "empty.png")).size


def test_plot_as_svg(tmp_path):
    pytest.importorskip("matplotlib")
    trials = [_ok(0, 1.0), _failed(1, TrialStatus.MISMATCH), _failed(2, TrialStatus.NOT_RUN)]
    path = plot_trials(trials, tmp_path / "trials.svg", best_index=0)
    text = path.read_text()
    assert "<svg" in text and "mismatch (1)" in text and "not_run (1)" in text


def test_plot_leaves_pyplot_alone(tmp_path):
    pytest.importorskip("matplotlib")
    was_imported = "matplotlib.pyplot" in sys.modules
    plot_trials([_ok(0, 1.0)], tmp_path / "a.png")
    assert ("matplotlib.pyplot" in sys.modules) == was_imported


def test_plot_rejects_an_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match=r"path='.*trials\.txt'.*\.png, \.svg, \.pdf"):
        plot_trials([_ok(0, 1.0)], tmp_path / "trials.txt")


def test_plot_without_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(ImportError, match=r'pip install "tileauto\[plot\]"'):
        plot_trials([_ok(0, 1.0)], tmp_path / "a.png")
    assert not (tmp_path / "a.png").exists()


def test_a_title_with_dollar_signs_is_drawn_as_text(tmp_path):
    """A config value such as ``"$x^$"`` in the title (``result.plot`` puts the config there)
    was parsed as TeX: a ValueError, and "cost $5 and $6" drawn in math italics."""
    pytest.importorskip("matplotlib")
    trial = _ok(0, 1.0)
    title = "k: {'tag': '$x^$'}, 1.0000 ms"
    assert _image(plot_trials([trial], tmp_path / "t.png", best_index=0, title=title)).size
