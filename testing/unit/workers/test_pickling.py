"""tileauto.workers.pickling: cloudpickle with the source files of functions sent by value."""

from __future__ import annotations

import inspect

import cloudpickle
import pytest

from tileauto.workers import pickling


def _make_factory():
    scale = 3

    def factory(n):
        def kernel(x):  # made at call time, as a @T.prim_func inside a factory is
            return x * scale * n

        return kernel

    return factory


def test_functions_sent_by_value_keep_their_source_file():
    factory = _make_factory()  # a closure: cloudpickle sends it by value
    loaded = cloudpickle.loads(pickling.dumps(factory))
    assert loaded is not factory
    assert loaded.__code__.co_filename == __file__
    kernel = loaded(2)
    assert kernel(1) == 6
    assert kernel.__code__.co_filename == __file__  # nested code objects too
    assert "return x * scale * n" in inspect.getsource(kernel)  # what TVMScript reads


def test_code_compiled_from_a_string_keeps_its_pseudo_file_name():
    namespace: dict = {}
    exec(compile("def f(x):\n    return x + 1\n", "<string>", "exec"), namespace)
    loaded = cloudpickle.loads(pickling.dumps(namespace["f"]))
    assert loaded(1) == 2
    assert loaded.__code__.co_filename == "<string>"


def test_a_dynamic_code_name_given_by_cloudpickle_is_the_only_one_replaced():
    factory = _make_factory()
    payload = pickling.dumps(factory)
    assert pickling.DYNAMIC_FILENAME.encode() not in payload
    assert __file__.encode() in payload


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"])
def test_tensors_torch_cannot_unpickle_travel_both_ways(dtype):
    # torch 2.13's own pickling of a float8 or uint32 tensor does not load back (the run
    # worker's reference outputs, captured inputs): they travel as views of a dtype that does
    import pickle

    import torch

    t = (torch.randn(8) * 100).to(getattr(torch, dtype)) if "float" in dtype else None
    if t is None:
        t = torch.arange(8, dtype=torch.int64).to(getattr(torch, dtype)) * 1000
    with pytest.raises(AttributeError):
        pickle.loads(pickle.dumps(t))  # the bug worked around: when torch fixes it, drop this
    for dumps in (pickling.dumps, pickling.dumps_plain):
        back = pickle.loads(dumps({"outputs": [t, t[::2]]}))["outputs"]
        assert back[0].dtype == t.dtype and torch.equal(
            back[0].view(torch.uint8), t.view(torch.uint8)
        )
        assert back[1].stride() == t[::2].stride()  # a view of the same strides
        assert torch.equal(
            back[1].contiguous().view(torch.uint8), t[::2].contiguous().view(torch.uint8)
        )
    plain = torch.randn(4)
    assert torch.equal(pickle.loads(pickling.dumps_plain(plain)), plain)  # others as torch does
