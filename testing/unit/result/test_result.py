"""AutotuneResult as a record: what it says about its trials (no kernel, no files)."""

from __future__ import annotations

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.result.record import AutotuneResult


def trial(index, block, ms=None, status=TrialStatus.OK, error=None):
    latency = LatencyStats.from_samples_ns([ms * 1e6] * 5) if ms is not None else None
    return Trial(index, {"block": block}, status, latency, 0.1, 0.2, error)


TRIALS = (
    trial(0, 16, 3.0),
    trial(1, 32, 1.0),
    trial(2, 64, status=TrialStatus.MISMATCH, error="B: 4 elements differ"),
)


def result(default=None, trials=TRIALS, config=None):
    return AutotuneResult(
        config=config or {"block": 32},
        latency=1.0,
        ref_latency=None,
        kernel=None,
        trials=trials,
        default_trial=default,
    )


def test_best_trial_speedup_and_default_latency():
    r = result(default=trial(0, 16, 3.0))
    assert r.best_trial is TRIALS[1]
    assert r.default_latency == 3.0
    assert r.speedup == 3.0


def test_a_failed_default_has_no_latency_and_no_speedup():
    r = result(default=trial(-1, 8, status=TrialStatus.CRASH, error="segfault"))
    assert r.default_latency is None and r.speedup is None


def test_the_default_config_outside_the_list_can_be_the_best_trial():
    default = trial(-1, 8, 0.5)
    r = result(default=default, config={"block": 8})
    assert r.best_trial is default
    view = r.as_tuning_result()
    assert view.best.config == {"block": 8}  # the cuTile view lists it too


def test_the_table_marks_the_winner_and_gives_each_failure_its_reason():
    table = result(default=trial(0, 16, 3.0)).table()
    lines = table.splitlines()
    winner = next(line for line in lines if line.startswith("*"))
    assert "block=32" in winner
    assert any("mismatch: B: 4 elements differ" in line for line in lines)


def test_the_cutile_view_splits_successes_and_failures():
    view = result().as_tuning_result()
    assert [m.config["block"] for m in view.successes] == [32, 16]  # fastest first
    assert [(c["block"], kind) for c, kind, _ in view.failures] == [(64, "mismatch")]


def test_the_cutile_view_of_an_unmeasured_lone_config_has_no_latency():
    r = result(trials=(), config={"block": 8})  # pruning left one config, run unmeasured
    view = r.as_tuning_result()
    assert view.best.config == {"block": 8} and view.best.samples == 0
    assert view.best.mean_ms != view.best.mean_ms  # NaN: nothing was measured
    assert view.successes == () and view.failures == ()


def test_the_plot_title_names_the_factory_and_a_short_latency(tmp_path, monkeypatch):
    import tileauto.result.record as record

    titles = []
    monkeypatch.setattr(record, "plot_trials", lambda *a, title=None, **k: titles.append(title))

    class Kernel:  # a tuned kernel: its PrimFunc is "main", its factory "add_one"
        class artifact:
            func_name = "main"

        origin = None

    r = AutotuneResult(
        config={"block": 16},
        latency=3.1e-05,
        ref_latency=None,
        kernel=Kernel(),
        trials=(trial(0, 16, 3.1e-05),),
        extra={"entry": {"kernel": "add_one"}},
    )
    r.plot(tmp_path / "p.png")
    assert titles == ["add_one: {'block': 16}, 3.1e-05 ms"]
