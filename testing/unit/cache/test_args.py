"""Tests of tileauto.cache.args: the identity of a call (jit and autotune caches key on it)."""

from __future__ import annotations

import json

import pytest
import torch

from tileauto.cache.args import (
    bind_arguments,
    call_key,
    default_config,
    describe_value,
    fast_key,
    is_tensor,
)


def factory(M, N, block=32, dtype="float32"):
    return None


def test_positional_and_keyword_give_the_same_key():
    k1 = call_key(factory, (64, 32), {})
    assert call_key(factory, (), {"M": 64, "N": 32}) == k1
    assert call_key(factory, (64,), {"N": 32}) == k1


def test_defaults_are_applied():
    assert call_key(factory, (64, 32), {}) == call_key(factory, (64, 32, 32, "float32"), {})
    assert call_key(factory, (64, 32), {"dtype": "float32"}) == call_key(factory, (64, 32), {})
    assert dict(call_key(factory, (64, 32), {}))["block"] == ("int", 32)


def test_different_values_give_different_keys():
    base = call_key(factory, (64, 32), {})
    assert call_key(factory, (64, 33), {}) != base
    assert call_key(factory, (64, 32), {"block": 16}) != base
    assert call_key(factory, (64, 32), {"dtype": "float16"}) != base


def test_a_negative_zero_and_a_nan_are_keys_of_their_own():
    # -0.0 == 0.0 served the kernel of 0.0 for -0.0 (a factory that bakes 1/d or copysign
    # computes another thing); nan != nan made every call with a NaN a miss, one more entry each
    assert call_key(factory, (64, -0.0), {}) != call_key(factory, (64, 0.0), {})
    assert fast_key((64, -0.0), {}) != fast_key((64, 0.0), {})
    assert fast_key((), {"d": -0.0}) != fast_key((), {"d": 0.0})
    assert fast_key((float("nan"),), {}) == fast_key((float("nan"),), {})
    assert call_key(factory, (float("nan"), 1), {}) == call_key(factory, (float("nan"), 1), {})
    assert fast_key((1,), {}) != fast_key((1.0,), {}) != fast_key((True,), {})


def test_key_is_hashable_and_ordered_by_parameter():
    key = call_key(factory, (), {"dtype": "int8", "N": 2, "M": 1})
    hash(key)
    assert [name for name, _ in key] == ["M", "N", "block", "dtype"]


def test_tensors_reduce_to_their_layout():
    a = torch.randn(4, 8)
    b = torch.zeros(4, 8)  # other values, same layout
    assert call_key(factory, (a, 1), {}) == call_key(factory, (b, 1), {})
    assert call_key(factory, (a, 1), {}) != call_key(factory, (torch.randn(4, 9), 1), {})
    assert call_key(factory, (a, 1), {}) != call_key(factory, (a.double(), 1), {})
    assert call_key(factory, (a, 1), {}) != call_key(factory, (a.t(), 1), {})  # strides
    assert call_key(factory, (a, 1), {}) != call_key(factory, (torch.randn(8, 4), 1), {})


def test_describe_tensor():
    t = torch.empty(3, 5, dtype=torch.float16)[:, ::2]
    assert describe_value(t) == {
        "tensor": [3, 3],
        "dtype": "float16",
        "stride": [5, 2],
        "device": "cpu",
    }
    meta = torch.empty(2, device="meta")
    assert describe_value(meta)["device"] == "meta"


def test_describe_nested_values_is_json():
    value = {"b": [1, (2.5, None)], "a": torch.zeros(2), 3: "x", "dt": torch.float32}
    described = describe_value(value)
    json.dumps(described)
    assert list(described) == ["3", "a", "b", "dt"]
    assert described["b"] == [1, [2.5, None]]
    assert described["dt"] == "torch.float32"
    assert described["a"]["tensor"] == [2]


def test_containers_of_tensors_are_hashable_keys():
    key = call_key(factory, ([torch.zeros(2), torch.ones(3)], {"x": torch.zeros(1)}), {})
    hash(key)


def test_other_objects_are_described_by_their_state_as_on_disk():
    import threading

    from tileauto.cache.key import describe_key_value

    class Opt:
        def __init__(self, level):
            self.level = level

        def __repr__(self):  # a repr that hides the state must not merge two calls
            return "Opt(fast)"

    assert describe_value(Opt(1)) != describe_value(Opt(2))
    assert describe_value(Opt(1)) == describe_value(Opt(1))
    assert describe_value(Opt(1)) == describe_key_value(Opt(1), content=False)
    lock = threading.Lock()  # no stable description: counts by identity in memory
    assert describe_value(lock) == {"object": "lock", "id": id(lock)}
    assert describe_value(torch.device("cpu")) == "cpu"


def test_is_tensor():
    assert is_tensor(torch.zeros(1))
    assert is_tensor(torch.nn.Parameter(torch.zeros(1)))
    assert not is_tensor([1])
    assert not is_tensor(torch.float32)


def test_bad_call_names_the_function():
    with pytest.raises(TypeError, match=r"factory\(M, N, block=32, dtype='float32'\)"):
        bind_arguments(factory, (1,), {})
    with pytest.raises(TypeError, match="unexpected keyword"):
        call_key(factory, (1, 2), {"blok": 4})


def test_bind_arguments_by_name():
    assert bind_arguments(factory, (1, 2), {"dtype": "int8"}) == {
        "M": 1,
        "N": 2,
        "block": 32,
        "dtype": "int8",
    }


def test_var_keyword_factories():
    def f(n, **opts):
        return None

    assert call_key(f, (1,), {"a": 1, "b": 2}) == call_key(f, (1,), {"b": 2, "a": 1})
    assert call_key(f, (1,), {"a": 1}) != call_key(f, (1,), {"a": 2})


def test_default_config():
    assert default_config(factory) == {"block": 32, "dtype": "float32"}


@pytest.mark.parametrize("a, b", [(True, 1), (1, 1.0)])
def test_scalar_types_are_part_of_the_key(a, b):
    assert call_key(factory, (64, 32, a), {}) != call_key(factory, (64, 32, b), {})


def test_numpy_scalar_arguments_become_python_scalars():
    import numpy as np

    from tileauto.cache.args import plain_arguments

    args, kwargs = plain_arguments((np.int64(3), np.float32(0.5)), {"flag": np.bool_(True)})
    assert args == (3, 0.5) and [type(a) for a in args] == [int, float]
    # numpy 2 names its bool type "bool", not "bool_": it stayed a numpy.bool
    assert kwargs == {"flag": True} and type(kwargs["flag"]) is bool
