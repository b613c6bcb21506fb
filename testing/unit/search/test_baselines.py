"""The Kernel Tuner-style baselines (genetic algorithm, particle swarm) and TPE's options."""

from __future__ import annotations

import pytest
from search_fakes import bowl, lookup

from tileauto.search import OptunaSearch, RandomSearch, run_search
from tileauto.search.baselines import GeneticSearch, ParticleSwarm
from tileauto.space import product


@pytest.mark.parametrize("make", [GeneticSearch, ParticleSwarm])
def test_they_propose_configs_of_the_space_never_twice_and_beat_random(make):
    space, latency = bowl()
    measure = lookup(space, latency)
    found = []
    for seed in range(3):
        outcome = run_search(make(), space, measure, max_trials=120, seed=seed, parallelism=8)
        assert len(outcome.trials) == 120 and outcome.stop_reason == "max_trials"
        found.append(min(t.latency_ms for t in outcome.trials.values() if t.ok))
    randoms = [
        min(
            t.latency_ms
            for t in run_search(
                RandomSearch(), space, measure, max_trials=120, seed=seed
            ).trials.values()
            if t.ok
        )
        for seed in range(3)
    ]
    assert sum(found) <= sum(randoms)  # the bowl is smooth: following the best pays


@pytest.mark.parametrize("make", [GeneticSearch, ParticleSwarm])
def test_they_walk_a_small_space_to_its_end_and_repeat_with_a_seed(make):
    space = product(a=[1, 2, 3], b=[1, 2, 3], constraints=["a != b"])
    measure = lookup(space, lambda c: float(c["a"] + 2 * c["b"]))
    outcome = run_search(make(popsize=4), space, measure, seed=1)
    assert len(outcome.trials) == len(space) == 6  # every config, none twice, then done
    assert outcome.stop_reason == "done"
    again = run_search(make(popsize=4), space, measure, seed=1)
    assert list(again.trials) == list(outcome.trials)


def test_bad_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match="GeneticSearch popsize must be an int >= 2, got 1"):
        GeneticSearch(popsize=1)
    with pytest.raises(ValueError, match="GeneticSearch mutation must be in"):
        GeneticSearch(mutation=2.0)
    with pytest.raises(ValueError, match="ParticleSwarm popsize"):
        ParticleSwarm(popsize=True)


def test_tpe_options_are_in_its_text():
    pytest.importorskip("optuna", reason="pip install optuna to run the TPE baseline")
    assert OptunaSearch("tpe", multivariate=True, constant_liar=True).describe() == (
        "OptunaSearch('tpe', budget=None, batch=None, multivariate=True, constant_liar=True)"
    )
    space, latency = bowl()
    outcome = run_search(
        OptunaSearch("tpe", multivariate=True, constant_liar=True),
        space,
        lookup(space, latency),
        max_trials=24,
        parallelism=8,
    )
    assert len(outcome.trials) == 24
