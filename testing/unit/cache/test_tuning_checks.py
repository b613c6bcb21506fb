"""tileauto.cache.tuning: measurements shared between tunings that differ only in their checks.

A tuning takes what a tuning of the same problem under other checks measured only when that
could not change its answer: a pass under checks at least as strict, a failure to compile.
No compiler: the stored "kernel" is a folder of fake files.
"""

from __future__ import annotations

import json

import pytest
from cache_fakes import fake_result, open_store, ref_a, ref_b, trial

from tileauto.cache import _checks as C
from tileauto.cache import tuning as T
from tileauto.options import ProfileArgs
from tileauto.records import TrialStatus

SPACE = [{"block": 8}, {"block": 16}, {"block": 32}, {"block": 64}]
# one pass, one wrong result, one failure to compile, one crash of the kernel
OUTCOMES = [
    trial(0, SPACE[0], 1.0),
    trial(1, SPACE[1], status=TrialStatus.MISMATCH),
    trial(2, SPACE[2], status=TrialStatus.COMPILE_ERROR),
    trial(3, SPACE[3], status=TrialStatus.CRASH),
]


def profile(**checks) -> ProfileArgs:
    return ProfileArgs(warmup=1, rep=3, **checks)


def tuned_with(tmp_path, **checks) -> T.TuningStore:
    store = open_store(space=SPACE, profile=profile(**checks))
    assert store.save(fake_result(tmp_path, OUTCOMES)) == store.key
    return store


def known_blocks(**checks) -> dict[int, T.Trial]:
    known = open_store(space=SPACE, profile=profile(**checks)).known_trials()
    return {json.loads(cid)["block"]: t for cid, t in known.items()}


def test_checks_are_apart_from_the_problem_they_measure():
    with_ref = open_store(space=SPACE, profile=profile(ref_prog=ref_a))
    without = open_store(space=SPACE, profile=profile())
    looser = open_store(space=SPACE, profile=profile(rtol=0.1))
    assert len({with_ref.key, without.key, looser.key}) == 3  # another answer may win
    assert with_ref.base_dir == without.base_dir == looser.base_dir
    assert len({with_ref.measure_dir, without.measure_dir, looser.measure_dir}) == 3
    timed_otherwise = open_store(space=SPACE, profile=ProfileArgs(warmup=2, rep=3))
    assert timed_otherwise.base_dir != without.base_dir


def test_a_tuning_without_a_reference_takes_only_failures_to_compile_from_one_with(tmp_path):
    # a pass against a ref_prog is no pass against the default config's outputs, which this
    # tuning compares with: a config unlike the default passed unmeasured and won (inputs hunt)
    tuned_with(tmp_path, ref_prog=ref_a)
    known = known_blocks()
    assert sorted(known) == [32]  # the failure to compile only
    assert known[32].status is TrialStatus.COMPILE_ERROR


def test_a_pass_is_lent_under_the_same_reference_and_tolerances_no_looser(tmp_path):
    tuned_with(tmp_path, ref_prog=ref_a, rtol=1e-3)
    known = known_blocks(ref_prog=ref_a)
    assert sorted(known) == [8, 32]  # the pass and the failure to compile
    assert known[8].latency_ms == 1.0 and known[8].status is TrialStatus.OK
    assert "measured by an earlier tuning checked against a reference program" in known[8].notes[-1]


def test_a_wrong_result_or_a_crash_is_measured_again(tmp_path):
    tuned_with(tmp_path, ref_prog=ref_a)
    known = known_blocks()
    assert 16 not in known and 64 not in known  # a looser check may pass them, a run may not crash


def test_looser_earlier_checks_lend_only_their_failures_to_compile(tmp_path):
    tuned_with(tmp_path, skip_check=True)
    assert sorted(known_blocks(ref_prog=ref_a)) == [32]
    assert sorted(known_blocks()) == [32]


def test_another_reference_lends_only_failures_to_compile(tmp_path):
    tuned_with(tmp_path, ref_prog=ref_a)
    assert sorted(known_blocks(ref_prog=ref_b)) == [32]


@pytest.mark.parametrize(
    ("earlier", "now", "passes"),
    [
        ({"rtol": 1e-3}, {"rtol": 1e-2}, True),
        ({"rtol": 1e-2}, {"rtol": 1e-3}, False),
        ({"atol": 1e-3, "max_mismatched_ratio": 0.0}, {}, True),
        ({"max_mismatched_ratio": 0.05}, {}, False),
        ({}, {"skip_check": True}, True),
    ],
)
def test_tolerances_no_looser_lend_their_passes(tmp_path, earlier, now, passes):
    tuned_with(tmp_path, **earlier)
    assert (8 in known_blocks(**now)) is passes


def test_the_order_of_strictness():
    record = C.checks_record
    base = {"ref_prog": None, "manual_check_prog": None, "skip_check": False}
    tol = {"rtol": 0.01, "atol": 0.01, "max_mismatched_ratio": 0.01}
    ref = record({**base, **tol, "ref_prog": {"source": "a"}})
    default = record({**base, **tol})
    skipped = record({**base, **tol, "skip_check": True})
    manual = record({**base, **tol, "manual_check_prog": {"source": "m"}})
    # a pass against a ref_prog is no pass against the default config's outputs: the first
    # was lent to a tuning without a ref_prog, where a config unlike the default then won
    assert not C.at_least_as_strict(ref, default) and not C.at_least_as_strict(default, ref)
    assert C.at_least_as_strict(ref, skipped)
    assert C.at_least_as_strict(default, skipped) and not C.at_least_as_strict(skipped, default)
    assert C.at_least_as_strict(manual, manual) and not C.at_least_as_strict(manual, default)
    assert not C.at_least_as_strict(default, manual)
    assert C.at_least_as_strict(ref, ref) and C.at_least_as_strict(skipped, skipped)


def test_what_was_taken_is_written_as_this_problem_s_own(tmp_path):
    tuned_with(tmp_path, ref_prog=ref_a, rtol=1e-3)
    store = open_store(space=SPACE, profile=profile(ref_prog=ref_a))
    known = store.known_trials()
    for t in known.values():
        store.save_trial(t)  # as the session records them
    assert len(list(store.measure_dir.glob("*.json"))) == 2
    checks = json.loads(store.measure_dir.with_suffix(".json").read_text())
    assert checks == store.checks and checks["rtol"] == 0.01
    again = open_store(space=SPACE, profile=profile(ref_prog=ref_a)).known_trials()
    assert {cid: t.notes for cid, t in again.items()} == {cid: t.notes for cid, t in known.items()}


@pytest.mark.parametrize("damage", ["edited", "writable_by_others", "folder_writable_by_others"])
def test_a_sibling_that_cannot_be_trusted_lends_nothing(tmp_path, damage):
    earlier = tuned_with(tmp_path, ref_prog=ref_a)
    record = earlier.measure_dir.with_suffix(".json")
    if damage == "edited":  # made to look like a stricter check than it was
        data = json.loads(record.read_text())
        data["rtol"] = 0.0
        record.write_text(json.dumps(data))
    elif damage == "writable_by_others":
        record.chmod(0o666)
    else:
        earlier.measure_dir.chmod(0o777)
    assert known_blocks() == {}
