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


def _drawn_figure(monkeypatch):
    """The figures plot_trials draws, kept for a test to read their axes."""
    from tileauto.report import plot

    figure_cls, canvas_cls, ticker = plot._matplotlib()
    figures = []

    def keep(*args, **kwargs):
        figures.append(figure_cls(*args, **kwargs))
        return figures[-1]

    monkeypatch.setattr(plot, "_matplotlib", lambda: (keep, canvas_cls, ticker))
    return figures


def test_a_0_ms_config_keeps_the_log_axis_and_is_drawn_at_its_bottom(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    figures = _drawn_figure(monkeypatch)
    zero = Trial(0, {"block": 0}, TrialStatus.OK, LatencyStats.from_samples_ns([0.0, 0.0, 0.0]))
    trials = [zero, _ok(1, 0.001), _ok(2, 10000.0)]
    plot_trials(trials, tmp_path / "zero.png", best_index=0, default=trials[1])
    ax = figures[0].axes[0]
    assert ax.get_yscale() == "log"  # 0 ms is a time: it does not flatten 1e-3..1e4 ms
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "0 ms (1)" in labels and "best [0]: 0 ms" in labels
    bottom, _ = ax.get_ylim()
    assert 0 < bottom < 0.001


def test_latencies_within_a_factor_of_20_stay_on_a_linear_axis(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    figures = _drawn_figure(monkeypatch)
    zero = Trial(0, {"block": 0}, TrialStatus.OK, LatencyStats.from_samples_ns([0.0]))
    plot_trials([zero, _ok(1, 1.0), _ok(2, 5.0)], tmp_path / "lin.png", best_index=0)
    assert figures[0].axes[0].get_yscale() == "linear"
