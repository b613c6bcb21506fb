"""The autotune lookup: a call with the sizes of an earlier one is served from memory.

The kernels here are stand-ins (``_kernel_for`` replaced): what is tested is which calls the
lookup answers by itself, not a tuning.
"""

from __future__ import annotations

import pytest

import tileauto
from tileauto.report.observer import TrialObserver


def factory(n, block=16):  # never elaborated here
    raise AssertionError("the lookup must not elaborate the factory")


def tuned_with_stand_ins(monkeypatch, **options):
    impl = tileauto.autotune(configs=[{"block": 8}], verbose=False, **options)(
        tileauto.jit(out_idx=[-1], target="llvm")(factory)
    )
    made: list[tuple] = []

    def kernel_for(args, kwargs):
        made.append((args, dict(kwargs)))
        return object()

    monkeypatch.setattr(impl, "_kernel_for", kernel_for)
    return impl, made


def test_a_call_of_ints_is_made_once_then_looked_up(monkeypatch):
    impl, made = tuned_with_stand_ins(monkeypatch)
    first = impl(64)
    assert impl(64) is first and impl(64) is first
    assert made == [((64,), {})]
    assert impl._int_calls == {(64,): first}
    assert impl(128) is not first and len(made) == 2


def test_values_equal_to_ints_are_not_taken_for_them(monkeypatch):
    impl, made = tuned_with_stand_ins(monkeypatch)
    impl(64)
    for other in (64.0, True, 1.0):  # equal keys for a dict, other calls for the factory
        got = impl(other)
        # answered as the general path answers it, never by the int call it equals
        assert got is impl._kernels.get((other,), {}, lambda a, k: pytest.fail("not made"))
        assert all(type(k[0]) is int for k in impl._int_calls)
    assert len(made) == 4  # 64, then 64.0, True and 1.0 each made on their own
    assert impl(1) is not impl(True)


def test_keyword_calls_take_the_general_path(monkeypatch):
    impl, made = tuned_with_stand_ins(monkeypatch)
    k = impl(n=64)
    assert impl(n=64) is k and made == [((), {"n": 64})]
    assert impl._int_calls == {}


def test_with_an_observer_every_call_is_told(monkeypatch):
    told = []
    impl, made = tuned_with_stand_ins(monkeypatch, on_trial=told.append)
    monkeypatch.setattr(TrialObserver, "cache_hit", lambda self, result: told.append(result))
    impl.results[impl._tuning_key((64,), {})] = "the result"
    impl(64)
    impl(64)
    assert impl._int_calls == {}  # never served without telling the observer
    assert told == ["the result"]  # the second call was a hit of memory, and told so
