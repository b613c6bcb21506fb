"""Tests of tileauto.options: bad values fail when the record is made, naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from tileauto.options import CompileArgs, ProfileArgs


@pytest.mark.parametrize("name", ["rtol", "atol"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, "0.1", None])
def test_tolerances_must_be_finite_numbers(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be a finite number >= 0, got"):
        ProfileArgs(**{name: value})


@pytest.mark.parametrize("value", ["0.5", float("nan"), 1.5, -0.1, None, True])
def test_mismatched_ratio_must_be_a_number_in_0_1(value):
    with pytest.raises(ValueError, match=r"max_mismatched_ratio must be a number in \[0, 1\]"):
        ProfileArgs(max_mismatched_ratio=value)


def test_numpy_numbers_are_accepted_as_tolerances():
    args = ProfileArgs(
        rtol=np.float32(1e-3), atol=np.float64(0), max_mismatched_ratio=np.float64(0)
    )
    assert args.rtol == pytest.approx(1e-3)


def test_backend_names():
    assert ProfileArgs(backend="cupti").backend == "cupti"
    with pytest.raises(ValueError, match="backend must be one of"):
        ProfileArgs(backend="nvtx")


def test_has_check():
    assert not ProfileArgs().has_check
    assert ProfileArgs(ref_prog=lambda a: a).has_check
    assert not ProfileArgs(ref_prog=lambda a: a, skip_check=True).has_check


def test_compile_args_out_idx():
    assert CompileArgs(out_idx=-1).out_idx == (-1,)
    with pytest.raises(TypeError, match="out_idx must be"):
        CompileArgs(out_idx="C")


def test_numpy_ints_are_taken_as_out_idx_as_in_configs():
    """``out_idx=np.int64(1)`` was refused, where configs and options take numpy's ints."""
    import numpy as np

    for given in (np.int64(1), [np.int32(1)], (np.int64(0), 1)):
        out = CompileArgs(out_idx=given).out_idx
        assert out is not None and all(type(i) is int for i in out), out
    with pytest.raises(TypeError, match="out_idx must be"):
        CompileArgs(out_idx=[np.float64(1.0)])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"seed": 2**70}, r"seed must be an int in \[0, 2\*\*63\)"),
        ({"seed": -1}, "seed must be"),
        ({"seed": 1.5}, "seed must be"),
        ({"retime_top_k": "3"}, "retime_top_k must be an int >= 0"),
        ({"retime_top_k": -1}, "retime_top_k must be"),
        ({"rep": 10**9}, r"rep=1000000000 ms is more than 600,000 ms .* use rep_iters"),
        ({"warmup": -1}, r"warmup must be a number of milliseconds >= 0"),
        ({"rep": 0}, r"rep must be a number of milliseconds > 0"),
        ({"rep": float("nan")}, "rep must be a number of milliseconds"),
        ({"rep": "100"}, "rep must be a number of milliseconds"),
        ({"rep_iters": 10**9}, r"rep_iters must be None or an int in \[1, 1,000,000\]"),
        ({"rep_iters": 0}, "rep_iters must be"),
        ({"warmup_iters": 2.5}, "warmup_iters must be"),
    ],
)
def test_bad_profile_options_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ProfileArgs(**kwargs)


@pytest.mark.parametrize("bad", [["a"], "0", [1.5]])
def test_inplace_args_must_be_ints(bad):
    with pytest.raises(TypeError, match="inplace_args must be None or a list of input positions"):
        ProfileArgs(inplace_args=bad)


def test_numpy_ints_are_accepted_and_become_python_ints():
    args = ProfileArgs(seed=np.int64(7), rep_iters=np.int32(5), inplace_args=[np.int64(0)])
    assert type(args.seed) is int and type(args.rep_iters) is int and args.inplace_args == (0,)
    assert ProfileArgs(rep=np.int64(50)).rep == 50.0
    assert ProfileArgs(inplace_args=0).inplace_args == (0,)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"supply_type": "randn"}, "supply_type must be None or a tileauto.TensorSupplyType"),
        ({"skip_check": "yes"}, "skip_check must be True or False"),
        ({"cache_input_tensors": 1}, "cache_input_tensors must be True or False"),
        ({"flush_cache": "no"}, "flush_cache must be None, True or False"),
        ({"ref_prog": 3}, "ref_prog must be callable"),
    ],
)
def test_bad_kinds_name_the_argument(kwargs, match):
    with pytest.raises(TypeError, match=match):
        ProfileArgs(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"timer": 3}, "timer must be None or a callable timer"),
        ({"verbose": "no"}, "verbose must be True or False"),
        ({"check_new_shapes": None}, "check_new_shapes must be True or False"),
    ],
)
def test_decorator_options_name_the_argument(kwargs, match):
    import tileauto

    with pytest.raises(TypeError, match=match):
        tileauto.autotune(configs=[{}], **kwargs)


@pytest.mark.parametrize("timeout", [True, float("nan"), 0, -1, "60", float("inf"), 1e7])
def test_timeout_must_be_a_positive_number_of_seconds(timeout):
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        ProfileArgs(timeout=timeout)


def test_compile_verbose_must_be_a_bool():
    with pytest.raises(TypeError, match="verbose must be True or False"):
        CompileArgs(verbose="yes")


def test_the_api_builds_profile_args_from_its_own_arguments_only():
    import tileauto

    tuner = tileauto.AutoTuner(lambda block=1: None, [{"block": 1}])
    tuner.set_profile_args(5, 10, rep_iters=3, seed=4)
    args = tuner.profile_args
    assert (args.warmup, args.rep, args.rep_iters, args.seed) == (5, 10, 3, 4)
    decorated = tileauto.autotune(configs=[{}], rep=7, seed=2)(tileauto.jit(lambda: None))
    assert decorated.profile_args.rep == 7 and decorated.profile_args.seed == 2


def test_every_profile_option_is_an_argument_of_both_apis():
    """An option is declared once, in ProfileArgs; the APIs must take it (or the test says so)."""
    import dataclasses
    import inspect

    from tileauto.api.builder import _POSITIONAL, AutoTuner
    from tileauto.api.decorator import autotune

    options = {f.name for f in dataclasses.fields(ProfileArgs)}
    missing = options - set(inspect.signature(autotune).parameters)
    assert not missing, f"autotune() does not take {sorted(missing)}"
    positional = list(inspect.signature(AutoTuner.set_profile_args).parameters)[1:-1]
    assert tuple(positional) == _POSITIONAL
    tuner = AutoTuner(lambda block=1: None, [{"block": 1}])
    for name in sorted(options - set(_POSITIONAL)):
        value = getattr(ProfileArgs(), name)
        tuner.set_profile_args(**{name: value})  # taken by keyword, no error
        assert getattr(tuner.profile_args, name) == value


def test_each_option_declares_its_key_and_worker_parts():
    import dataclasses

    from tileauto.cache.tuning import profile_fingerprint

    declared = {f.name: f.metadata for f in dataclasses.fields(ProfileArgs)}
    assert all("key" in m and "worker" in m for m in declared.values())
    problem = profile_fingerprint(ProfileArgs())
    search = profile_fingerprint(ProfileArgs(), part="search")
    for name, meta in declared.items():
        shown = f"{name}_ms" if meta["key"] == "ms" else name
        keyed = search if meta["search"] else problem  # search options: the entry key only
        assert (shown in keyed) == (meta["key"] is not None), name
        assert shown not in (problem if meta["search"] else search), name
    assert set(search) == {"search", "max_trials", "max_seconds", "plateau"}
    worker = ProfileArgs(rtol=0.5, on_trial=print, retime_top_k=7).for_worker()
    assert worker.rtol == 0.5  # the worker needs it
    assert worker.on_trial is None and worker.retime_top_k == 3  # the caller's only


def test_num_threads_above_the_process_cpus_is_refused_at_the_call():
    import tileauto
    from tileauto.machine import available_cpus

    cpus = available_cpus()
    assert ProfileArgs(num_threads=cpus).num_threads == cpus
    for make in (
        lambda: ProfileArgs(num_threads=10**6),
        lambda: tileauto.autotune(configs=[{}], num_threads=cpus + 1),
        lambda: tileauto.AutoTuner(lambda: None, configs=[{}]).set_profile_args(
            num_threads=cpus + 1
        ),
    ):
        with pytest.raises(ValueError, match=r"num_threads=\d+: \d+ threads are more than") as info:
            make()
        assert f"the {cpus} CPUs this process may use" in str(info.value)
        assert f"expected at most {cpus}" in str(info.value)


def test_an_out_idx_not_in_parameter_order_warns_that_outputs_come_in_parameter_order():
    import warnings

    with pytest.warns(
        UserWarning,
        match=r"out_idx=\[2, 1\]: a call returns the outputs in parameter order, \[1, 2\]",
    ):
        CompileArgs(out_idx=[2, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CompileArgs(out_idx=[1, 2])
        CompileArgs(out_idx=[-2, -1])
        CompileArgs(out_idx=[0, -1])  # mixed signs: the order is known at compile only
