"""Size variables are keyed by identity through a whole tuning: compile, inputs, run, cache."""

from __future__ import annotations

import json

import torch
from symbolic_kernels import two_sizes_named_n

import tileauto
from tileauto.cache import key as cache_key

FAST = {"warmup": 0, "rep": 2, "verbose": False}
CONFIGS = [{"vec": 2}, {"vec": 4}]


def check_kernel(kernel, n: int, m: int) -> None:
    a, b = torch.randn(n), torch.randn(m)
    s, t = kernel(a, b)
    torch.testing.assert_close(s, 2 * a)
    torch.testing.assert_close(t, b.repeat_interleave(2))


def test_two_size_variables_named_alike_tune_with_captured_inputs_and_load_from_the_cache():
    impl = tileauto.jit(out_idx=[2, 3])(two_sizes_named_n)
    inputs = (torch.randn(5), torch.randn(7))
    with tileauto.set_autotune_inputs(*inputs):
        tuned = tileauto.autotune(configs=CONFIGS, **FAST)(impl)
        kernel = tuned()
        again = tileauto.autotune(configs=CONFIGS, **FAST)(impl)
        loaded = again()
    assert all(t.ok for t in tuned.get_tuner_result().trials)
    assert [p.shape for p in kernel.params] == [("n",), ("n_1",), ("n",), ("n_1 * 2",)]
    check_kernel(kernel, 5, 7)
    check_kernel(kernel, 3, 9)
    # the second tuning of the same problem is a hit: the stored parameters keep the keys
    assert again.get_tuner_result().cache_hit
    assert loaded.params == kernel.params
    check_kernel(loaded, 9, 2)


def test_a_supply_program_tells_two_size_variables_named_alike_apart(tmp_path):
    seen = tmp_path / "seen.json"  # the supply program runs in the run worker

    def supply(params):
        seen.write_text(json.dumps([[p.shape, p.size_names] for p in params]))
        sizes = {"n": 6, "n_1": 4}
        return [torch.randn([sizes[d] for d in p.shape]) for p in params]

    impl = tileauto.jit(out_idx=[2, 3])(two_sizes_named_n)
    kernel = tileauto.autotune(configs=CONFIGS, supply_prog=supply, **FAST)(impl)()
    assert json.loads(seen.read_text()) == [[["n"], {"n": "n"}], [["n_1"], {"n_1": "n"}]]
    check_kernel(kernel, 6, 4)


def test_an_entry_of_the_format_before_keys_by_identity_is_a_clean_miss(monkeypatch):
    impl = tileauto.jit(out_idx=[2, 3])(two_sizes_named_n)
    with tileauto.set_autotune_inputs(torch.randn(5), torch.randn(7)):
        with monkeypatch.context() as patch:
            # format 1 stored these parameters with the two variables merged into one
            patch.setattr(cache_key, "FORMAT_VERSION", 1)
            tileauto.autotune(configs=CONFIGS, **FAST)(impl)()
        again = tileauto.autotune(configs=CONFIGS, **FAST)(impl)
        kernel = again()
    assert not again.get_tuner_result().cache_hit
    check_kernel(kernel, 3, 9)
