"""``on_trial`` on real LLVM kernels: how each config was validated, and the marker of a cache hit."""

from __future__ import annotations

import pytest
from tune_kernels import scale

import tileauto
from tileauto import Validation

pytestmark = pytest.mark.timeout(300)

FAST = {"warmup_iters": 1, "rep_iters": 3, "verbose": False}
CONFIGS = [{"vec": 4}, {"vec": 16}]  # vec=8, the factory's default, is the reference


def by_vec(func, args, *, warmup, rep, config, device):
    """A scripted timer: vec=16 wins whatever the machine's load."""
    func(*args)
    return [{4: 2.0, 8: 3.0, 16: 1.0}[config["vec"]] * 1e6] * rep


def decorated(seen, **options):
    return tileauto.autotune(
        configs=CONFIGS, timer=by_vec, on_trial=seen.append, **FAST, **options
    )(tileauto.jit(out_idx=[-1], target="llvm")(scale))


def test_a_memory_and_a_disk_cache_hit_each_give_the_observer_one_marked_trial():
    seen = []
    tuned = decorated(seen)
    kernel = tuned(1024)
    assert {t.config["vec"] for t in seen} == {4, 8, 16} and not any(t.cache_hit for t in seen)
    by_vec_seen = {t.config["vec"]: t for t in seen}
    assert by_vec_seen[4].validation is by_vec_seen[16].validation is Validation.DEFAULT
    assert by_vec_seen[8].validation is Validation.SKIPPED  # the reference itself

    seen.clear()
    assert tuned(1024) is kernel  # the decorator's memory answers
    assert len(seen) == 1
    assert seen[0].cache_hit and seen[0].ok and seen[0].config == {"vec": 16}

    seen.clear()
    again = decorated(seen)  # a new decorator (a new process, say): the disk cache answers
    again(1024)
    assert len(seen) == 1 and seen[0].cache_hit and seen[0].config == {"vec": 16}
    result = again.get_tuner_result(1024)
    assert result.cache_hit and not any(t.cache_hit for t in result.trials)
    assert [t.validation for t in result.trials] == [Validation.DEFAULT] * 2  # as stored


def double(a):
    return a * 2


def test_a_tuning_bucket_hit_is_marked_and_ref_prog_trials_say_reference():
    seen = []
    tuned = decorated(seen, ref_prog=double, key=lambda n: "one bucket")
    tuned(512)
    assert {t.validation for t in seen} == {Validation.REFERENCE}
    assert not any(t.cache_hit for t in seen)
    seen.clear()
    tuned(1024)  # other arguments in the same tuning bucket: its config, compiled, no tuning
    assert len(seen) == 1 and seen[0].cache_hit and seen[0].config == {"vec": 16}
