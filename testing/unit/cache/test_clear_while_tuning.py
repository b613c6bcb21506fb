"""``tileauto cache clear`` while a tuning runs: what it deleted stays deleted, what the tuning
measures afterwards, and its result, are still stored."""

from __future__ import annotations

import json
import warnings

from cache_fakes import fake_result, open_store, trial

from tileauto.cache import catalog


def test_trials_measured_after_a_clear_and_the_result_are_still_stored(tmp_path):
    space = [{"block": 8}, {"block": 16}, {"block": 4}]
    store = open_store(space=space)
    first = trial(0, space[0], 1.0)
    assert store.save_trial(first)
    catalog.clear(store.root)  # another process clears the cache: the folder goes
    assert not store.measure_dir.exists()
    later = [trial(1, space[1], 2.0), trial(2, space[2], 3.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not cached" warning
        assert store.save_trial(later[0])
        assert store.save(fake_result(tmp_path, [first, *later])) == store.key
    known = open_store(space=space).known_trials()
    assert sorted(json.loads(cid)["block"] for cid in known) == [4, 16]  # 8 was cleared
    assert open_store(space=space).load() is not None
