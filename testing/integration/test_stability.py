"""The timing is trustworthy: repeated tunings agree, and the statistics are the timer's.

A scripted timer stands in for the clock: each config has a fixed latency, plus seeded noise
smaller than the gaps between configs (and, in one case, rare large spikes such as a run
preempted by another job). The kernels are real LLVM kernels, compiled, validated and run in
the run worker as usual; only the numbers the timer returns are scripted. The tuning cache is
off, so every tuning measures every config again.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

import pytest
from tune_kernels import scale_jit

import tileauto

REP = 41
# vec -> latency (ms). The winner (vec=4) is neither first in the space nor the default (vec=8).
LATENCY_MS = {4: 1.00, 8: 1.25, 16: 1.50, 32: 2.00}
SPACE = [{"vec": 16}, {"vec": 4}, {"vec": 32}, {"vec": 8}]
NOISE_MS = 0.10  # uniform in [-NOISE_MS, +NOISE_MS]: less than half the smallest gap (0.25)


@dataclass(frozen=True)
class ScriptedTimer:
    """Per-config latencies with seeded noise; the same (seed, config) gives the same samples.

    ``spike_every``: one sample in this many is a spike ``spike_ms`` slower (0: no spikes).
    """

    seed: int
    spike_every: int = 0
    spike_ms: float = 5.0

    def samples_ns(self, config: dict, rep: int) -> list[float]:
        rng = random.Random(f"{self.seed}/{config['vec']}")
        out = []
        for _ in range(rep):
            ms = LATENCY_MS[config["vec"]] + rng.uniform(-NOISE_MS, NOISE_MS)
            if self.spike_every and rng.randrange(self.spike_every) == 0:
                ms += self.spike_ms
            out.append(ms * 1e6)
        return out

    def __call__(self, func, args, *, warmup, rep, config, device):
        func(*args)  # the kernel runs for real; only its clock is scripted
        return self.samples_ns(config, rep)


def _tune(timer: ScriptedTimer, n: int = 1024, retime_top_k: int = 3):
    return (
        tileauto.AutoTuner.from_kernel(scale_jit(n), SPACE)
        .set_profile_args(warmup_iters=1, rep_iters=REP, timer=timer, retime_top_k=retime_top_k)
        .run(verbose=False)
    )


@pytest.fixture(autouse=True)
def no_tuning_cache(monkeypatch):
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_DISABLE_CACHE", "1")


@pytest.mark.parametrize("spike_every", [0, 20], ids=["noise", "noise+spikes"])
def test_three_tunings_in_a_row_pick_the_same_winner(spike_every):
    results = [_tune(ScriptedTimer(seed=seed, spike_every=spike_every)) for seed in range(3)]
    assert [r.config for r in results] == [{"vec": 4}] * 3
    for r in results:
        # every config was measured again (no cache), with the full repetition count
        assert [t.config for t in r.trials] == SPACE
        assert all(t.ok and t.run_s is not None and t.latency.samples == REP for t in r.trials)
        # the measured order is the scripted order, not only the winner
        by_latency = sorted(r.trials, key=lambda t: t.latency_ms)
        assert [t.config["vec"] for t in by_latency] == [4, 8, 16, 32]
        assert r.kernel.config["vec"] == 4


def test_latency_statistics_are_what_the_timer_produced():
    timer = ScriptedTimer(seed=7, spike_every=10)
    result = _tune(timer, retime_top_k=0)  # one timing block per config, as scripted
    for trial in result.trials:
        ms = sorted(s / 1e6 for s in timer.samples_ns(trial.config, REP))
        p20, _, _, p80 = statistics.quantiles(ms, n=5, method="inclusive")
        stats = trial.latency
        assert stats.samples == REP == len(ms)
        assert stats.median_ms == pytest.approx(statistics.median(ms), rel=1e-12)
        assert stats.p20_ms == pytest.approx(p20, rel=1e-12)
        assert stats.p80_ms == pytest.approx(p80, rel=1e-12)
        assert stats.min_ms == pytest.approx(ms[0], rel=1e-12)
        assert stats.mean_ms == pytest.approx(statistics.fmean(ms), rel=1e-12)
        assert stats.p20_ms <= stats.median_ms <= stats.p80_ms
    winner = next(t for t in result.trials if t.config == result.config)
    assert result.latency == winner.latency.median_ms
    # the default config (vec=8) is in the space: its trial is that one, with the same numbers
    assert result.default_trial.config == {"vec": 8}
    assert result.default_trial.latency == next(
        t.latency for t in result.trials if t.config == {"vec": 8}
    )


def test_the_best_configs_are_retimed_interleaved_with_the_same_number_of_samples():
    result = _tune(ScriptedTimer(seed=3, spike_every=0), retime_top_k=2)
    retimed = [t for t in result.trials if any("re-timed interleaved" in n for n in t.notes)]
    assert 2 <= len(retimed) <= 3  # the best two, and the default config when it is not one
    assert all(t.latency.samples == REP for t in result.trials if t.ok)
    assert result.config == {"vec": 4}
